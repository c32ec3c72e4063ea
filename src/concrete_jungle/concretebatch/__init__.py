"""ConcreteBatch, the dataset between the stages: its shards, manifests and digests and their writer (`shards`),
reading its records back (`reading`), and sharing it as Parquet files (`export`). The package offers the names of
`shards` and `reading` (``from concrete_jungle.concretebatch import iter_records``)."""

from .reading import (
                      MEMBERS,
                      NUMBERED_MEMBER,
                      IndexedConcreteBatch,
                      decoded,
                      ids_under_key,
                      index_shards,
                      iter_quintuples,
                      iter_records,
                      picture,
                      read_manifest,
                      read_member,
                      record_fields,
)
from .shards import (
                      SHARD_PATTERN,
                      ShardWriter,
                      anchor_truth,
                      dataset_digest,
                      encode_jpeg,
                      negative_count,
                      negative_members,
                      negative_slots,
                      negatives_of,
                      positive_count,
                      positive_member,
                      positives_per_record,
                      read_shard_manifests,
                      recorded_digest,
                      sample_key,
                      shard_files,
                      shard_name,
                      shard_problem,
                      shard_urls,
                      slots_of,
                      unfinished,
                      write_shard_manifest,
)

__all__ = ["MEMBERS", "NUMBERED_MEMBER", "SHARD_PATTERN", "IndexedConcreteBatch", "ShardWriter", "anchor_truth",
           "dataset_digest", "decoded", "encode_jpeg", "ids_under_key", "index_shards", "iter_quintuples",
           "iter_records", "negative_count", "negative_members", "negative_slots", "negatives_of", "picture",
           "positive_count", "positive_member", "positives_per_record", "read_manifest", "read_member",
           "read_shard_manifests", "record_fields", "recorded_digest", "sample_key", "shard_files", "shard_name",
           "shard_problem", "shard_urls", "slots_of", "unfinished", "write_shard_manifest"]
