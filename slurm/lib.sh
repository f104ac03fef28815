# Shared body of the fedmpi sbatch scripts (sourced, not run). One entry: fedmpi_main CONFIG NAME SCRIPT ARGS...
#
# Inside a job (`sbatch slurm/fedface_3party.sh ARGS`, or a script run inside salloc) it places every rank
# (each party on as few nodes as possible, one GPU per rank), launches `python -m fedmpi.run` with
# `srun --mpi=pmix` (or the site's mpirun), forwards the preemption signal, and requeues the job when the
# run stops for preemption (exit 75) so that the requeued job resumes with --resume auto.
# Outside a job (`slurm/fedface_3party.sh ARGS`) it sizes the allocation from the layout and submits the
# calling script with sbatch (FEDMPI_DRY_RUN=1: print that sbatch command only).
#
# ARGS: [--config FILE] [--resume auto|PATH] [key=value ...]   (the arguments of fedmpi.run)
# Site settings: environment variables or the file slurm/site.env (see slurm/site.env.example); a variable
# already set in the environment wins over the file.

FEDMPI_EXIT_PREEMPTED=75

fedmpi_die() {
    echo "fedmpi: $*" >&2
    exit 1
}

fedmpi_log() {
    echo "fedmpi: $*" >&2
}

# The repository: FEDMPI_ROOT, else the folder above the script's own. sbatch runs a spooled copy of the
# script, so inside a job the original path comes from scontrol.
fedmpi_find_root() {
    local script="$1"
    if [ -n "${FEDMPI_ROOT:-}" ]; then
        (cd "$FEDMPI_ROOT" && pwd) || fedmpi_die "FEDMPI_ROOT=$FEDMPI_ROOT: no such folder"
        return
    fi
    if [ -n "${SLURM_JOB_ID:-}" ]; then
        local command
        command=$(scontrol show job "$SLURM_JOB_ID" 2>/dev/null | sed -n 's/^ *Command=\([^ ]*\).*/\1/p' | head -n1)
        if [ -n "$command" ] && [ -f "$command" ]; then
            script="$command"
        fi
    fi
    (cd "$(dirname "$script")/.." && pwd)
}

# Site settings: the file first, then whatever the caller's environment had already set (which wins).
fedmpi_load_site() {
    local site="${FEDMPI_SITE_FILE:-$FEDMPI_ROOT/slurm/site.env}"
    if [ -n "${FEDMPI_SITE_FILE:-}" ] && [ ! -f "$site" ]; then
        fedmpi_die "FEDMPI_SITE_FILE=$site: no such file"
    fi
    if [ -f "$site" ]; then
        local saved
        # `declare -gx`: restored as globals (a plain declare inside a function would make them local).
        saved=$(export -p | grep -E '^declare -x (FEDMPI_|NCCL_|GLOO_)' | sed 's/^declare -x /declare -gx /' || true)
        set -a
        # shellcheck disable=SC1090
        source "$site" || fedmpi_die "cannot read the site file $site"
        set +a
        eval "$saved"
    fi
    FEDMPI_CPU="${FEDMPI_CPU:-0}"
    FEDMPI_GPUS_PER_NODE="${FEDMPI_GPUS_PER_NODE:-8}"
    FEDMPI_LAUNCHER="${FEDMPI_LAUNCHER:-srun}"
    FEDMPI_SRUN_MPI="${FEDMPI_SRUN_MPI:-pmix}"
    case "$FEDMPI_LAUNCHER" in
        srun|mpirun) ;;
        *) fedmpi_die "FEDMPI_LAUNCHER=$FEDMPI_LAUNCHER: must be srun or mpirun" ;;
    esac
    case "$FEDMPI_CPU" in
        0|1) ;;
        *) fedmpi_die "FEDMPI_CPU=$FEDMPI_CPU: must be 0 or 1" ;;
    esac
    [[ "$FEDMPI_GPUS_PER_NODE" =~ ^[1-9][0-9]*$ ]] || fedmpi_die "FEDMPI_GPUS_PER_NODE=$FEDMPI_GPUS_PER_NODE: must be a count > 0"
}

# Site setup, modules and the Python that has fedmpi's dependencies (FEDMPI_PYTHON, else FEDMPI_VENV's,
# else the repository's .venv, else python3 on PATH).
fedmpi_find_python() {
    if [ -n "${FEDMPI_SETUP:-}" ]; then
        eval "$FEDMPI_SETUP" || fedmpi_die "FEDMPI_SETUP failed: $FEDMPI_SETUP"
    fi
    if [ -n "${FEDMPI_MODULES:-}" ]; then
        command -v module >/dev/null 2>&1 || fedmpi_die "FEDMPI_MODULES is set but there is no module command (set FEDMPI_SETUP to load it)"
        # shellcheck disable=SC2086
        module load $FEDMPI_MODULES || fedmpi_die "module load $FEDMPI_MODULES failed"
    fi
    if [ -z "${FEDMPI_PYTHON:-}" ]; then
        if [ -n "${FEDMPI_VENV:-}" ]; then
            FEDMPI_PYTHON="$FEDMPI_VENV/bin/python"
        elif [ -x "$FEDMPI_ROOT/.venv/bin/python" ]; then
            FEDMPI_PYTHON="$FEDMPI_ROOT/.venv/bin/python"
        else
            FEDMPI_PYTHON="$(command -v python3 || true)"
        fi
    fi
    [ -x "$FEDMPI_PYTHON" ] || fedmpi_die "python not found: set FEDMPI_VENV or FEDMPI_PYTHON (tried '$FEDMPI_PYTHON')"
}

# Python with the repository importable (jobs.placement, fedmpi.layout).
fedmpi_py() {
    PYTHONPATH="$FEDMPI_ROOT${PYTHONPATH:+:$PYTHONPATH}" "$FEDMPI_PYTHON" "$@"
}

# Split ARGS into the config file, fedmpi.run's own flags and the dotted overrides.
fedmpi_parse_args() {
    FEDMPI_ARG_CONFIG="$1"
    shift
    FEDMPI_ARG_FLAGS=()
    FEDMPI_ARG_OVERRIDES=()
    while [ "$#" -gt 0 ]; do
        case "$1" in
            --config) [ "$#" -ge 2 ] || fedmpi_die "--config needs a file"; FEDMPI_ARG_CONFIG="$2"; shift 2 ;;
            --config=*) FEDMPI_ARG_CONFIG="${1#--config=}"; shift ;;
            --resume) [ "$#" -ge 2 ] || fedmpi_die "--resume needs auto or a path"; FEDMPI_ARG_FLAGS+=(--resume "$2"); shift 2 ;;
            --resume=*) FEDMPI_ARG_FLAGS+=(--resume "${1#--resume=}"); shift ;;
            --allow-config-changes) FEDMPI_ARG_FLAGS+=("$1"); shift ;;
            -*) fedmpi_die "unknown option $1 (accepted: --config FILE, --resume auto|PATH, --allow-config-changes, key=value overrides)" ;;
            *=*) FEDMPI_ARG_OVERRIDES+=("$1"); shift ;;
            *) fedmpi_die "argument '$1' is not an override: write key.path=value" ;;
        esac
    done
    # A relative config is found from the working folder first, then from the repository.
    if [ -f "$FEDMPI_ARG_CONFIG" ]; then
        FEDMPI_ARG_CONFIG="$(cd "$(dirname "$FEDMPI_ARG_CONFIG")" && pwd)/$(basename "$FEDMPI_ARG_CONFIG")"
    elif [[ "$FEDMPI_ARG_CONFIG" != /* ]] && [ -f "$FEDMPI_ROOT/$FEDMPI_ARG_CONFIG" ]; then
        FEDMPI_ARG_CONFIG="$FEDMPI_ROOT/$FEDMPI_ARG_CONFIG"
    else
        fedmpi_die "config file not found: $FEDMPI_ARG_CONFIG"
    fi
}

fedmpi_layout() {
    fedmpi_py -m fedmpi.layout --config "$FEDMPI_ARG_CONFIG" "${FEDMPI_ARG_OVERRIDES[@]}" \
        || fedmpi_die "cannot build the layout of $FEDMPI_ARG_CONFIG ${FEDMPI_ARG_OVERRIDES[*]}"
}

# The run's log file, {log.dir}/{log.name}/log.h5, as the config and OVERRIDES resolve it; only the folder
# ({log.dir}/) when log.name is empty (fedmpi.run would then pick a timestamped name).
fedmpi_run_log() {
    fedmpi_py -c 'import sys; from fedmpi.config import load_config
cfg = load_config(sys.argv[1], sys.argv[2:])
print(f"{cfg.log.dir}/{cfg.log.name}/log.h5" if cfg.log.name else f"{cfg.log.dir}/")' "$FEDMPI_ARG_CONFIG" "$@"
}

fedmpi_world() {
    "$FEDMPI_PYTHON" -c 'import json, sys; print(json.loads(sys.argv[1])["world"])' "$1"
}

# The sbatch options (nodes, tasks per node, GPUs) that hold LAYOUT with each party kept together.
fedmpi_sbatch_options() {
    local layout="$1"
    if [ "$FEDMPI_CPU" = 1 ]; then
        fedmpi_py -m jobs.placement sbatch-options --layout "$layout" --cpu \
            --slots "${FEDMPI_RANKS_PER_NODE:-$(fedmpi_world "$layout")}"
    else
        fedmpi_py -m jobs.placement sbatch-options --layout "$layout" --slots "$FEDMPI_GPUS_PER_NODE"
    fi
}

# Outside a job: submit SCRIPT with the allocation its layout needs, and the site's partition/account/...
fedmpi_submit() {
    local script="$1" name="$2"
    shift 2
    local layout options
    layout=$(fedmpi_layout) || exit 1
    options=$(fedmpi_sbatch_options "$layout") || fedmpi_die "cannot size the allocation"
    local command=(sbatch --job-name="$name")
    [ -n "${FEDMPI_PARTITION:-}" ] && command+=(--partition="$FEDMPI_PARTITION")
    [ -n "${FEDMPI_ACCOUNT:-}" ] && command+=(--account="$FEDMPI_ACCOUNT")
    [ -n "${FEDMPI_QOS:-}" ] && command+=(--qos="$FEDMPI_QOS")
    [ -n "${FEDMPI_TIME:-}" ] && command+=(--time="$FEDMPI_TIME")
    [ -n "${FEDMPI_CPUS_PER_TASK:-}" ] && command+=(--cpus-per-task="$FEDMPI_CPUS_PER_TASK")
    # shellcheck disable=SC2206
    command+=($options ${FEDMPI_SBATCH_ARGS:-} "$script" "$@")
    if [ "${FEDMPI_DRY_RUN:-0}" = 1 ]; then
        printf '%q ' "${command[@]}"
        echo
        return 0
    fi
    export FEDMPI_ROOT
    "${command[@]}"
}

# Inside a job: the ranks' environment (threads, interfaces, imports).
fedmpi_export_run_env() {
    export PYTHONPATH="$FEDMPI_ROOT${PYTHONPATH:+:$PYTHONPATH}"
    export PYTHONUNBUFFERED=1
    export OMP_NUM_THREADS="${FEDMPI_OMP_THREADS:-${SLURM_CPUS_PER_TASK:-1}}"
    if [ -n "${FEDMPI_NCCL_IFNAME:-}" ]; then
        export NCCL_SOCKET_IFNAME="$FEDMPI_NCCL_IFNAME" GLOO_SOCKET_IFNAME="$FEDMPI_NCCL_IFNAME"
    fi
}

# Inside a job: place the ranks, launch, forward the preemption signal, requeue on exit 75.
fedmpi_run_in_job() {
    local layout world hosts hostfile cap=0
    [ "$FEDMPI_CPU" = 1 ] || cap="$FEDMPI_GPUS_PER_NODE"
    local resuming=0
    if [ "${SLURM_RESTART_COUNT:-0}" -ge 1 ] || [[ " ${FEDMPI_ARG_FLAGS[*]} " == *" --resume "* ]]; then
        resuming=1
    fi
    if [ "$resuming" = 1 ] && [ "${FEDMPI_FIT_ALLOCATION:-1}" = 1 ]; then
        # A requeued (or resubmitted) job may get fewer nodes than the run started on: shrink the parties that
        # must shrink to what this allocation holds, each keeping its batch per step, so that the resume
        # continues the same run (docs/CLUSTER.md, "Resuming on another allocation").
        local fitted
        fitted=$(fedmpi_py -m jobs.fit_layout --config "$FEDMPI_ARG_CONFIG" "${FEDMPI_ARG_OVERRIDES[@]}" \
                 --tasks-per-node "${SLURM_TASKS_PER_NODE:?not set: run this inside a Slurm job}" \
                 --max-per-node "$cap") || exit 1
        if [ -n "$fitted" ]; then
            fedmpi_log "job $SLURM_JOB_ID holds fewer slots ($SLURM_TASKS_PER_NODE) than the layout: resuming with $fitted"
            # shellcheck disable=SC2206
            FEDMPI_ARG_OVERRIDES+=($fitted)
        fi
    fi
    layout=$(fedmpi_layout) || exit 1
    world=$(fedmpi_world "$layout")
    hosts=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | tr '\n' ' ')
    hostfile=$(mktemp "${TMPDIR:-/tmp}/fedmpi-$SLURM_JOB_ID.XXXXXX.hosts")
    # shellcheck disable=SC2064
    trap "rm -f '$hostfile'" EXIT
    fedmpi_py -m jobs.placement hostfile --layout "$layout" --hosts "$hosts" \
        --tasks-per-node "${SLURM_TASKS_PER_NODE:?not set: run this inside a Slurm job}" --max-per-node "$cap" \
        > "$hostfile" || fedmpi_die "job $SLURM_JOB_ID cannot hold the layout; submit with sbatch $(fedmpi_sbatch_options "$layout" 2>/dev/null)"

    local run_args=(--config "$FEDMPI_ARG_CONFIG" "${FEDMPI_ARG_FLAGS[@]}")
    if [ "${SLURM_RESTART_COUNT:-0}" -ge 1 ] && [[ " ${FEDMPI_ARG_FLAGS[*]} " != *" --resume "* ]]; then
        run_args+=(--resume auto)
        fedmpi_log "restart ${SLURM_RESTART_COUNT} of job $SLURM_JOB_ID: resuming from the latest checkpoint"
    fi
    local overrides=()
    [ "$FEDMPI_CPU" = 1 ] && overrides+=(run.device=cpu)
    overrides+=("${FEDMPI_ARG_OVERRIDES[@]}")
    local run_log
    run_log=$(fedmpi_run_log "${overrides[@]}") || exit 1
    if [[ "$run_log" == */ ]]; then
        # A name that the requeued job (same job id) finds again, so that --resume auto continues this run.
        overrides+=("log.name=${SLURM_JOB_NAME:-fedmpi}-$SLURM_JOB_ID")
        run_log="${run_log}${SLURM_JOB_NAME:-fedmpi}-$SLURM_JOB_ID/log.h5"
    fi

    fedmpi_export_run_env
    local launch
    if [ "$FEDMPI_LAUNCHER" = srun ]; then
        export SLURM_HOSTFILE="$hostfile"
        # Since Slurm 22.05 srun no longer inherits the job's --cpus-per-task (sbatch(1)): without it each rank
        # and its DataLoader workers would share one core.
        # shellcheck disable=SC2206
        launch=(srun --mpi="$FEDMPI_SRUN_MPI" --distribution=arbitrary --ntasks="$world"
                --nodes="$(sort -u "$hostfile" | wc -l)" --kill-on-bad-exit=1
                ${SLURM_CPUS_PER_TASK:+--cpus-per-task="$SLURM_CPUS_PER_TASK"} ${FEDMPI_SRUN_ARGS:-})
    else
        local mpirun="${FEDMPI_MPIRUN:-$(command -v mpirun || true)}"
        [ -n "$mpirun" ] || mpirun="$(dirname "$FEDMPI_PYTHON")/mpirun"
        [ -x "$mpirun" ] || fedmpi_die "FEDMPI_LAUNCHER=mpirun but no mpirun found: set FEDMPI_MPIRUN"
        # Open MPI 5 options: rank i on the host of line i of the hostfile (the sequential mapper).
        # shellcheck disable=SC2206
        launch=("$mpirun" -n "$world" --map-by "seq:file=$hostfile" --bind-to none
                -x PYTHONPATH -x PYTHONUNBUFFERED -x OMP_NUM_THREADS ${FEDMPI_MPIRUN_ARGS:-})
    fi
    launch+=("$FEDMPI_PYTHON" -m fedmpi.run "${run_args[@]}" "${overrides[@]}")
    fedmpi_log "job $SLURM_JOB_ID: $world ranks in $( [ "$FEDMPI_CPU" = 1 ] && echo CPU || echo GPU) mode: $(printf '%q ' "${launch[@]}")"

    # The launcher runs in the background so that this shell can forward USR1/TERM (sent to the batch
    # shell by --signal=B:USR1@... or scancel --batch) to it; srun and mpirun pass them on to every rank.
    "${launch[@]}" &
    local pid=$! rc preempting=0
    trap "preempting=1; kill -USR1 $pid 2>/dev/null" USR1
    trap "preempting=1; kill -TERM $pid 2>/dev/null" TERM
    while true; do
        wait "$pid"
        rc=$?
        kill -0 "$pid" 2>/dev/null || break   # else a trapped signal interrupted wait: the launcher still runs
    done
    trap - USR1 TERM

    # srun exits 0 when a step fails to launch at all; a run that really finished has written its log.
    if [ "$rc" -eq 0 ] && [ -z "$(find "$run_log" -newer "$hostfile" 2>/dev/null)" ]; then
        fedmpi_log "${launch[0]} exited 0 but $run_log was not written by this job: the ranks did not run (see the errors above)"
        rc=1
    fi
    # Preempted: the ranks exit 75 after the checkpoint; srun's --kill-on-bad-exit then kills any rank still
    # exiting after KillWait (seen on a loaded node: status 137), so any failure after a forwarded signal counts
    # too. The requeued job resumes from the newest complete checkpoint (--resume auto checks its manifest).
    if [ "$rc" -eq "$FEDMPI_EXIT_PREEMPTED" ] || { [ "$preempting" = 1 ] && [ "$rc" -ne 0 ]; }; then
        fedmpi_log "the run stopped for preemption (launcher status $rc); requeueing job $SLURM_JOB_ID"
        if scontrol requeue "$SLURM_JOB_ID"; then
            sleep 600 &   # the requeue ends this job; wait for that rather than report an exit status
            wait $!
        fi
        fedmpi_log "requeue of job $SLURM_JOB_ID failed; resubmit with --resume auto to continue"
    fi
    return "$rc"
}

fedmpi_main() {
    local config="$1" name="$2" script="$3"
    shift 3
    FEDMPI_ROOT=$(fedmpi_find_root "$script") || exit 1
    fedmpi_load_site
    fedmpi_find_python
    fedmpi_parse_args "$config" "$@"
    if [ -z "${SLURM_JOB_ID:-}" ]; then
        fedmpi_submit "$(cd "$(dirname "$script")" && pwd)/$(basename "$script")" "$name" "$@"
    else
        fedmpi_run_in_job
    fi
}
