"""The malloc settings fedmpi.run starts its ranks under (fedmpi/core/malloc.py): added once, never over a user's."""
from fedmpi.core.malloc import TUNABLES, tuned_environment


def test_the_tunables_are_added_once_beside_other_tunables():
    env = tuned_environment({"PATH": "/bin", "GLIBC_TUNABLES": "glibc.pthread.rseq=0"}, libc="glibc")
    assert env["GLIBC_TUNABLES"] == f"glibc.pthread.rseq=0:{TUNABLES}" and env["PATH"] == "/bin"
    assert tuned_environment(env, libc="glibc") is None          # the restarted process does not start again
    assert tuned_environment({}, libc="glibc")["GLIBC_TUNABLES"] == TUNABLES


def test_a_users_own_malloc_setting_or_the_opt_out_is_kept():
    for env in ({"GLIBC_TUNABLES": "glibc.malloc.arena_max=2"}, {"MALLOC_MMAP_THRESHOLD_": "131072"},
                {"FEDMPI_MALLOC": "default"}):
        assert tuned_environment(env, libc="glibc") is None
    assert tuned_environment({}, libc="musl") is None
