#pragma once
// How the all-to-all CP exchange (`cp_comm_type: a2a`, and the inner all-to-all of `a2a+p2p`)
// divides attention heads over a group of `ranks`: every rank of the group ends up with whole
// sequences for a slice of the heads.
//
// Query heads (for a Gated DeltaNet layer: its value heads) are split evenly: rank r gets
// heads [r·Hq/a, (r+1)·Hq/a). K/V heads (DeltaNet: its key heads) follow the query heads they
// serve (query head h uses K/V head h / (Hq/Hkv)):
//   Hkv >= a: rank r gets K/V heads [r·Hkv/a, (r+1)·Hkv/a);
//   Hkv <  a: every K/V head is REPLICATED on a/Hkv consecutive ranks (rank r gets K/V head
//             r·Hkv/a); in backward the replicas' dK/dV are summed onto the owner's rows.
// The rule (what head_sharding_problem checks): Hq % a == 0, and Hkv % a == 0 or a % Hkv == 0
// (Hq % Hkv == 0 is the model's own GQA rule). Then a rank's query heads never straddle two
// K/V heads. Example: Qwen3-30B-A3B, Hq = 32, Hkv = 4: a = 2, 4 split K/V heads; a = 8 .. 32
// replicate them 2 .. 8 times; a = 64 cannot work (32 query heads over 64 ranks).

#include <cstdint>
#include <string>

namespace dyncp::config {

struct HeadSharding {
  std::int64_t ranks = 1;
  std::int64_t query_heads = 1;
  std::int64_t kv_heads = 1;

  std::int64_t query_heads_per_rank() const { return query_heads / ranks; }
  std::int64_t kv_heads_per_rank() const { return kv_heads >= ranks ? kv_heads / ranks : 1; }
  // How many ranks hold each K/V head (1: no replication).
  std::int64_t kv_replicas() const { return kv_heads >= ranks ? 1 : ranks / kv_heads; }
  std::int64_t first_query_head(std::int64_t rank) const { return rank * query_heads_per_rank(); }
  std::int64_t first_kv_head(std::int64_t rank) const { return rank * kv_heads / ranks; }
};

// Empty when `ranks` can share the heads by the rule above; otherwise the reason, naming the
// head counts and the group size.
std::string head_sharding_problem(std::int64_t query_heads, std::int64_t kv_heads,
                                  std::int64_t ranks);

}  // namespace dyncp::config
