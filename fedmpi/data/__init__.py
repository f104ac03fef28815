"""Training and validation data: insightface RecordIO and `.bin` pair sets, image folders, synthetic faces,
silo splits, Dirichlet partitions and the per-rank batch stream."""
from .errors import DataError
from .face_dataset import ConcatFaceDataset, FaceDataset, FaceSubset, FolderFaceDataset, RecFaceDataset
from .partition import dirichlet_partition, partition_hash, split_by_identity
from .sampler import ShardBatchSampler
from .sets import open_training_set, prepare_training_set, prepare_validation_sets
from .verification_bin import load_bin, read_pairs, write_bin

__all__ = ["DataError", "FaceDataset", "RecFaceDataset", "FolderFaceDataset", "FaceSubset", "ConcatFaceDataset",
           "split_by_identity", "dirichlet_partition", "partition_hash", "ShardBatchSampler",
           "prepare_training_set", "open_training_set", "prepare_validation_sets", "load_bin", "read_pairs",
           "write_bin"]
