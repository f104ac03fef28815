"""The parties of the run configuration and their data (`parties`, `data`): each party's name, rank count,
batch per rank and training set (synthetic faces, a RecordIO release or an image folder, or a Dirichlet client
of one), an attack for the robustness studies, and the validation sets every party is scored on. The
conventions are those of sections.py."""
from __future__ import annotations

import importlib.util
import math
from dataclasses import dataclass, field

DECODERS = ("cpu", "gpu")


@dataclass
class DataSpec:
    """Where one party's training images come from."""
    kind: str = "synthetic"          # synthetic | rec | folder
    path: str = ""                   # rec: folder with train.rec/train.idx; folder: one sub-folder per identity
    style: str = "ms1m"              # synthetic: the party's prior (ms1m | ga | vgg | public: data.public's)
    identities: int = 500            # synthetic only
    images_per_identity: int = 20    # synthetic only
    split_index: int = 0             # 12-party setting: part split_index of split_count, by identity
    split_count: int = 1
    shuffle_labels: bool = False     # permute the labels over the images (useless data; FV behaviour tests)
    dirichlet_clients: int = 0       # > 0: this party is one client of a Dirichlet partition (Hsu et al.) ...
    dirichlet_client: int = 0        # ... of the dataset into this many clients: client index
    dirichlet_alpha: float = 1.0     # concentration; 0 = one class per client
    dirichlet_seed: int = 0

    def validate(self, fail, where: str) -> None:
        if self.kind == "synthetic":
            if self.identities <= 0:
                fail(f"{where}.identities", f"an empty party: must be > 0, got {self.identities}")
            if self.images_per_identity <= 0:
                fail(f"{where}.images_per_identity", f"an empty party: must be > 0, got {self.images_per_identity}")
        elif not self.path:
            fail(f"{where}.path", f"kind {self.kind} needs a path")
        if self.split_count <= 0 or not 0 <= self.split_index < self.split_count:
            fail(f"{where}.split_index", f"must be in 0..split_count-1 (split_count={self.split_count})")
        if self.dirichlet_clients < 0 or (self.dirichlet_clients
                                          and not 0 <= self.dirichlet_client < self.dirichlet_clients):
            fail(f"{where}.dirichlet_client", f"must be in 0..dirichlet_clients-1 "
                                              f"(dirichlet_clients={self.dirichlet_clients})")
        if self.dirichlet_alpha < 0:
            fail(f"{where}.dirichlet_alpha", f"must be >= 0, got {self.dirichlet_alpha}")
        if self.kind == "synthetic" and self.identities < self.split_count:
            fail(f"{where}.identities", f"an empty party: {self.identities} identities cannot be split "
                                        f"into {self.split_count} parts")


@dataclass
class AttackSpec:
    """What a bad party does to its upload, for robustness studies: the trainable values of θ_i are sent as
    Θ + scale·(θ_i − Θ) (Θ the round's global model; frozen values and BN statistics are sent as trained).
    1 is honest, -1 a sign-flipped update, 10 an update scaled up, 0 a free rider sending Θ back. `short_rows`: the
    rows its leader leaves off the end of its class payload (W_k or its summary; a payload that many rows short)."""
    scale: float = 1.0
    short_rows: int = 0

    def validate(self, fail, where: str) -> None:
        if not math.isfinite(self.scale):
            fail(f"{where}.scale", f"must be a finite number, got {self.scale}")
        if self.short_rows < 0:
            fail(f"{where}.short_rows", f"must be >= 0 (0: the whole payload), got {self.short_rows}")

    @property
    def honest(self) -> bool:
        return self.scale == 1.0 and self.short_rows == 0


@dataclass
class PartyConfig:
    name: str = ""
    ranks: int = 1
    data: DataSpec = field(default_factory=DataSpec)
    attack: AttackSpec = field(default_factory=AttackSpec)
    batch_size: int | None = None    # images per rank and step; empty: optim.batch_size

    def validate(self, cfg: "Config", fail, i: int) -> None:
        where = f"parties.{self.name or i}"
        if not self.name:
            fail(f"parties[{i}].name", "every party needs a name")
        if [p.name for p in cfg.parties].count(self.name) > 1:
            fail(f"{where}.name", "party names must be unique")
        if self.ranks <= 0:
            fail(f"{where}.ranks", f"must be > 0, got {self.ranks}")
        if self.batch_size is not None and self.batch_size <= 0:
            fail(f"{where}.batch_size", f"must be > 0 (or empty: optim.batch_size), got {self.batch_size}")
        per_rank = self.batch_size or cfg.optim.batch_size
        if cfg.model.bn_batch and per_rank % cfg.model.bn_batch:
            fail(f"{where}.batch_size" if self.batch_size else "model.bn_batch",
                 f"party {self.name}'s {per_rank} images per rank are not a multiple of model.bn_batch="
                 f"{cfg.model.bn_batch}")
        self.data.validate(fail, f"{where}.data")
        self.attack.validate(fail, f"{where}.attack")
        if not self.attack.honest and (cfg.fed.setting == "centralized" or cfg.cross_device):
            key = "scale" if self.attack.scale != 1.0 else "short_rows"
            fail(f"{where}.attack.{key}", "only a party of the federated (or solo) layout uploads; "
                                          f"fed.setting={cfg.fed.setting}"
                                          f"{' with cross-device clients' if cfg.cross_device else ''} has none")


def _three_parties() -> list[PartyConfig]:
    return [PartyConfig("ms1m", 8, DataSpec(style="ms1m")),
            PartyConfig("ga", 4, DataSpec(style="ga")),
            PartyConfig("vgg", 4, DataSpec(style="vgg"))]


@dataclass
class PublicData:
    """An identity set every party holds besides its own (FedFR's public set: the identities its starting model was
    trained on), read-only, identity-disjoint from every party's and from the validation sets. Its images never
    count as a party's data (the run log describes it apart, /data attrs `public`)."""
    kind: str = ""                   # "" (none) | synthetic | rec | folder
    path: str = ""                   # rec: folder with train.rec/train.idx; folder: one sub-folder per identity
    identities: int = 200            # synthetic only
    images_per_identity: int = 10    # synthetic only

    def spec(self) -> DataSpec:
        """The set as a training-set source (data/sets.py); the synthetic one has identities of its own (style
        `public`: the ms1m prior, other identity seeds)."""
        return DataSpec(kind=self.kind, path=self.path, style="public", identities=self.identities,
                        images_per_identity=self.images_per_identity)

    def validate(self, cfg: "Config", fail) -> None:
        if self.kind not in ("", "synthetic", "rec", "folder"):
            fail("data.public.kind", f"{self.kind!r} is not one of '' (none), synthetic, rec, folder")
        if self.kind:
            from fedmpi.config.rules import algorithm_method

            self.spec().validate(fail, "data.public")
            if cfg.cross_device:
                fail("data.public", "is held by the silo parties; the cross-device clients read CIFAR")
            held = [p.name for p in cfg.parties if p.data.kind == "synthetic" and p.data.style == "public"]
            if self.kind == "synthetic" and held:
                fail(f"parties.{held[0]}.data.style", "public: the party would hold data.public's synthetic "
                                                      "identities, which must be no party's own")
            if not algorithm_method(cfg).training.public_identities:
                fail("data.public.kind", f"the public set is read by a rule that trains over its identities too "
                                         f"(fedfr); fed.algorithm={cfg.fed.algorithm} does not (leave it empty)")


@dataclass
class DataConfig:
    root: str = "data"               # synthetic sets are generated here
    image_size: int = 112
    workers: int | None = None       # DataLoader workers per trainer rank; empty: 2 on a GPU, 0 on CPU
    decoder: str = "cpu"             # cpu | gpu: where a trainer's JPEGs are decoded: Pillow in its DataLoader
                                     # workers, or nvJPEG (TorchCodec) on its GPU, the workers only reading
    seed: int = 0
    skip_bad: bool = False
    val_sets: list[str] = field(default_factory=lambda: ["lfw", "cfp_fp", "agedb_30", "calfw", "cplfw"])
    val_kind: str = "synthetic"      # synthetic | bin
    val_path: str = ""
    val_pairs_per_fold: int = 100
    public: PublicData = field(default_factory=PublicData)
    heldout: int = 0                 # images of each identity held out of every party's training set (the first ones
                                     # in the set's order: FedFR's split), the party's personalised test images;
                                     # 0: none, no personalised evaluation

    def loader_workers(self, device) -> int:
        """DataLoader workers for a rank on `device`. Each worker is a forked copy of its rank (on CPU about
        660 MB of anonymous memory once Python's reference counts have touched the pages), which a CPU rank's
        decoding does not repay (`data.workers=0` there); a GPU rank keeps 2, so decoding overlaps its steps."""
        if self.workers is not None:
            return self.workers
        return 2 if getattr(device, "type", device) == "cuda" else 0

    def decodes_on(self, device) -> bool:
        """Whether a trainer rank on `device` decodes its batches there (data/device_decode.py) rather than in its
        DataLoader workers."""
        return self.decoder == "gpu" and getattr(device, "type", device) == "cuda"

    def validate(self, cfg: "Config", fail) -> None:
        if self.decoder not in DECODERS:
            fail("data.decoder", f"must be one of {', '.join(DECODERS)}, got {self.decoder!r}")
        if self.decoder == "gpu" and cfg.run.device == "cpu":
            fail("data.decoder", "gpu decodes on the rank's GPU, but run.device is cpu")
        if self.decoder == "gpu" and importlib.util.find_spec("torchcodec") is None:
            fail("data.decoder", "gpu decodes with TorchCodec, which is not installed (pip install torchcodec)")
        if not self.image_size > 0:
            fail("data.image_size", f"must be > 0, got {self.image_size}")
        if self.image_size % 16:
            fail("data.image_size", f"must be a multiple of 16 (the backbone downsamples by 16), got {self.image_size}")
        if self.workers is not None and self.workers < 0:
            fail("data.workers", f"must be >= 0 (or empty: 2 on a GPU, 0 on CPU), got {self.workers}")
        if self.val_pairs_per_fold <= 0:
            fail("data.val_pairs_per_fold", f"must be > 0, got {self.val_pairs_per_fold}")
        self.public.validate(cfg, fail)
        if self.heldout < 0 or self.heldout == 1:
            fail("data.heldout", f"must be 0 (none) or >= 2 (the 1:1 protocol's genuine pairs are two held-out "
                                 f"images of one identity), got {self.heldout}")
        if self.heldout:
            if cfg.cross_device:
                fail("data.heldout", "splits the silo parties' identities; the cross-device clients have none")
            if cfg.eval.every == 0:
                fail("data.heldout", "its images are read by the personalised evaluation, which runs with the "
                                     "held-out evaluation; eval.every=0 means none (set eval.every > 0)")
            for p in cfg.parties:
                spec = p.data
                if spec.kind == "synthetic" and spec.images_per_identity <= self.heldout:
                    fail(f"parties.{p.name}.data.images_per_identity", f"{spec.images_per_identity} images per "
                         f"identity leave none to train on after data.heldout={self.heldout}")
