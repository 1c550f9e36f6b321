#pragma once
// Automatic prefix caching: a radix tree over token ids at block granularity. Each node below
// the root is one FULL block of BlockSize tokens, reached by the tokens of every block before
// it, and holds the physical block that stores its KV. A new request whose prompt starts with
// a cached path reuses those blocks (shared, ref-counted) instead of recomputing them.
//
// The tree owns one reference to each block it holds, so a block a sequence released stays
// cached; it is "unreferenced" when the tree is its only owner (ref count 1) and can then be
// evicted, least recently used leaf first. Only leaves are evicted: a node's block is useful
// only together with its ancestors, so removing an inner node would strand its subtree.
//
// A cached block is never written: any sequence holding it sees a ref count above one, and
// the paged cache copies a shared block before writing into it.
//
// Groups > 1 (a hybrid cache, see layer_groups.hpp): a logical block is one physical block per
// layer group, so a node holds `Groups` blocks, row-major in every span and vector below
// ([block][group], as the paged cache's tables). A group's entry may be `no_block`: a sliding
// layer's block that its sequence had already released when it offered the prefix, or one the
// cache gave up. Whether a matched path is usable (a sliding layer needs the blocks of its
// window) is the caller's decision, through match's `select`. Groups marked `strippable` (the
// sliding ones) may lose an unreferenced entry of an inner node when memory runs short: a
// global entry never goes alone, since the subtree below would be stranded without it.
#include <algorithm>
#include <array>
#include <cstdint>
#include <map>
#include <set>
#include <span>
#include <stdexcept>
#include <utility>
#include <vector>

#include <tinfer/kv/block_pool.hpp>

namespace tinfer::kv {

struct PrefixCacheStats {
    std::int64_t hit_requests = 0;   // requests that reused at least one cached block
    std::int64_t miss_requests = 0;  // requests that reused nothing
    std::int64_t hit_tokens = 0;     // tokens served from the cache
    std::int64_t miss_tokens = 0;    // tokens offered for matching but not found

    double token_hit_rate() const {
        std::int64_t const offered = hit_tokens + miss_tokens;
        return offered == 0 ? 0.0 : static_cast<double>(hit_tokens) / static_cast<double>(offered);
    }
};

template <int BlockSize, int Groups = 1>
class PrefixCache {
    static_assert(BlockSize > 0, "PrefixCache: BlockSize must be positive");
    static_assert(Groups > 0, "PrefixCache: Groups must be positive");

  public:
    using BlockTokens = std::array<int, BlockSize>;
    using Row = std::array<BlockId, Groups>;  // one logical block: its block in each group
    static constexpr BlockId no_block = -1;

    // Blocks of a cached prefix, each retained once for the caller (who now owns them):
    // [block][group], no_block where the entry was absent or not selected.
    struct Match {
        std::vector<BlockId> blocks;
        int tokens = 0;  // blocks.size() / Groups * BlockSize
    };

    // `strippable`: the groups whose entries may be evicted from inner nodes (see above).
    explicit PrefixCache(std::array<bool, Groups> strippable = {}) : strippable_(strippable) {
        nodes_.push_back(Node{});  // the root: the empty prefix, no block
    }

    // The longest cached prefix of `tokens` made of full blocks; counts a hit or a miss.
    Match match(std::span<int const> tokens, BlockPool& pool) {
        return match(tokens, pool, [](std::span<BlockId>, int blocks) { return blocks; });
    }

    // As match(tokens, pool), but `select(path, blocks)` sees the entries of the `blocks` full
    // blocks the tree holds for the prompt ([block][group], no_block where absent) and returns
    // how many leading blocks to take; it may set entries of those to no_block to leave them
    // (a sliding layer's blocks before its window). Only the entries left are retained.
    template <class Select>
    Match match(std::span<int const> tokens, BlockPool& pool, Select&& select) {
        Match found;
        std::uint64_t const now = ++clock_;
        int node = root;
        for (std::size_t start = 0; start + BlockSize <= tokens.size(); start += BlockSize) {
            auto const child = nodes_[index(node)].children.find(block_tokens(tokens, start));
            if (child == nodes_[index(node)].children.end()) break;
            node = child->second;
            touch(node, now);
            Row const& row = nodes_[index(node)].blocks;
            found.blocks.insert(found.blocks.end(), row.begin(), row.end());
        }
        int const walked = static_cast<int>(found.blocks.size()) / Groups;
        int const taken = std::clamp(
            static_cast<int>(select(std::span<BlockId>(found.blocks), walked)), 0, walked);
        found.blocks.resize(static_cast<std::size_t>(taken) * Groups);
        for (BlockId const b : found.blocks) {
            if (b != no_block) pool.retain(b);
        }
        found.tokens = taken * BlockSize;
        ++(found.tokens > 0 ? stats_.hit_requests : stats_.miss_requests);
        stats_.hit_tokens += found.tokens;
        stats_.miss_tokens += static_cast<std::int64_t>(tokens.size()) - found.tokens;
        return found;
    }

    // The entries match() would walk for `tokens` ([block][group]), without taking them:
    // nothing is retained, touched or counted. What a scheduler prices an admission with.
    std::vector<BlockId> peek(std::span<int const> tokens) const {
        std::vector<BlockId> path;
        int node = root;
        for (std::size_t start = 0; start + BlockSize <= tokens.size(); start += BlockSize) {
            auto const child = nodes_[index(node)].children.find(block_tokens(tokens, start));
            if (child == nodes_[index(node)].children.end()) break;
            node = child->second;
            Row const& row = nodes_[index(node)].blocks;
            path.insert(path.end(), row.begin(), row.end());
        }
        return path;
    }

    // Caches the full blocks of `tokens` (blocks[i*Groups + g] holds tokens [i*BlockSize,
    // (i+1)*BlockSize) of group g, or is no_block). A prefix already cached keeps its blocks
    // (an absent entry of it takes the sequence's); the sequence's own copies stay private to
    // it. Returns how many blocks became cached.
    int insert(std::span<int const> tokens, std::span<BlockId const> blocks, BlockPool& pool) {
        std::size_t const full_blocks = std::min(tokens.size() / BlockSize, blocks.size() / Groups);
        std::uint64_t const now = ++clock_;
        int node = root;
        int added = 0;
        for (std::size_t i = 0; i < full_blocks; ++i) {
            BlockTokens const key = block_tokens(tokens, i * BlockSize);
            Row row;
            std::copy_n(blocks.begin() + static_cast<std::ptrdiff_t>(i * Groups), Groups,
                        row.begin());
            auto const existing = nodes_[index(node)].children.find(key);
            if (existing != nodes_[index(node)].children.end()) {
                node = existing->second;
                touch(node, now);
                Row& held = nodes_[index(node)].blocks;
                for (std::size_t g = 0; g < Groups; ++g) {
                    if (held[g] == no_block && row[g] != no_block) {
                        pool.retain(row[g]);
                        held[g] = row[g];
                        ++cached_blocks_;
                        ++added;
                    }
                }
                continue;
            }
            for (BlockId const b : row) {
                if (b != no_block) {
                    pool.retain(b);
                    ++added;
                }
            }
            node = add_child(node, key, row, now);
        }
        return added;
    }

    // Frees at least `wanted` blocks that only the cache holds (when there are that many),
    // least recently used leaf first, then strippable entries of inner nodes, oldest first.
    // A node gives up all its blocks at once, so up to Groups - 1 more may be freed. Returns
    // how many were freed.
    int evict(int wanted, BlockPool& pool) {
        int freed = 0;
        while (freed < wanted) {
            // Leaves a sequence still uses are skipped. Evicting a leaf may make its parent a
            // leaf, so the scan starts again from the oldest each time.
            auto victim = std::find_if(
                leaves_by_age_.begin(), leaves_by_age_.end(),
                [&](auto const& leaf) { return unreferenced(nodes_[index(leaf.second)], pool); });
            if (victim == leaves_by_age_.end()) break;
            freed += remove_leaf(victim->second, pool);
        }
        if (freed < wanted) freed += strip(wanted - freed, pool);
        return freed;
    }

    // Drops every cached block (those still used by sequences stay with them).
    void clear(BlockPool& pool) {
        for (std::size_t i = 1; i < nodes_.size(); ++i) {
            if (!nodes_[i].live) continue;
            for (BlockId const b : nodes_[i].blocks) {
                if (b != no_block) pool.release(b);
            }
        }
        nodes_.assign(1, Node{});
        free_nodes_.clear();
        leaves_by_age_.clear();
        cached_blocks_ = 0;
    }

    int cached_blocks() const { return cached_blocks_; }

    // Blocks evict() could free now: the blocks of nodes that, with their whole subtree, no
    // sequence holds (leaves go first, so a block under a used descendant stays), plus the
    // unreferenced strippable entries of the other nodes.
    int evictable_blocks(BlockPool const& pool) const {
        int count = 0;
        auto const visit = [&](auto const& self, int node) -> bool {
            bool subtree_unused = true;
            for (auto const& entry : nodes_[index(node)].children) {
                subtree_unused = self(self, entry.second) && subtree_unused;
            }
            if (node == root) return subtree_unused;
            Node const& n = nodes_[index(node)];
            bool const evictable = subtree_unused && unreferenced(n, pool);
            for (std::size_t g = 0; g < Groups; ++g) {
                if (n.blocks[g] == no_block) continue;
                count += evictable || (strippable_[g] && pool.ref_count(n.blocks[g]) == 1) ? 1 : 0;
            }
            return evictable;
        };
        visit(visit, root);
        return count;
    }
    PrefixCacheStats const& stats() const { return stats_; }

    // Calls f(block) for every block the cache holds (one reference each); for invariant checks.
    template <class F>
    void for_each_block(F&& f) const {
        for (std::size_t i = 1; i < nodes_.size(); ++i) {
            if (!nodes_[i].live) continue;
            for (BlockId const b : nodes_[i].blocks) {
                if (b != no_block) f(b);
            }
        }
    }

  private:
    static constexpr int root = 0;
    static constexpr int no_parent = -1;

    struct Node {
        Row blocks = filled_row(no_block);
        int parent = no_parent;
        BlockTokens key{};  // the tokens this block holds, its key in the parent's children
        std::map<BlockTokens, int> children;
        std::uint64_t last_used = 0;
        bool live = true;
    };

    static std::size_t index(int node) { return static_cast<std::size_t>(node); }

    static constexpr Row filled_row(BlockId b) {
        Row row;
        row.fill(b);
        return row;
    }

    // No sequence holds any of the node's blocks: removing it frees them all.
    static bool unreferenced(Node const& n, BlockPool const& pool) {
        for (BlockId const b : n.blocks) {
            if (b != no_block && pool.ref_count(b) != 1) return false;
        }
        return true;
    }

    // Releases up to `wanted` unreferenced strippable entries, least recently used node first.
    int strip(int wanted, BlockPool& pool) {
        bool any = false;
        for (bool const s : strippable_) any = any || s;
        if (!any) return 0;
        std::vector<std::pair<std::uint64_t, int>> by_age;
        for (std::size_t i = 1; i < nodes_.size(); ++i) {
            if (nodes_[i].live) by_age.emplace_back(nodes_[i].last_used, static_cast<int>(i));
        }
        std::sort(by_age.begin(), by_age.end());
        int freed = 0;
        for (auto const& [age, node] : by_age) {
            Row& row = nodes_[index(node)].blocks;
            for (std::size_t g = 0; g < Groups && freed < wanted; ++g) {
                if (!strippable_[g] || row[g] == no_block || pool.ref_count(row[g]) != 1) continue;
                pool.release(row[g]);
                row[g] = no_block;
                --cached_blocks_;
                ++freed;
            }
            if (freed == wanted) break;
        }
        return freed;
    }

    static BlockTokens block_tokens(std::span<int const> tokens, std::size_t start) {
        BlockTokens key;
        std::copy_n(tokens.begin() + static_cast<std::ptrdiff_t>(start), BlockSize, key.begin());
        return key;
    }

    bool is_leaf(int node) const { return node != root && nodes_[index(node)].children.empty(); }

    void touch(int node, std::uint64_t now) {
        Node& n = nodes_[index(node)];
        if (is_leaf(node)) {
            leaves_by_age_.erase({n.last_used, node});
            leaves_by_age_.insert({now, node});
        }
        n.last_used = now;
    }

    int add_child(int parent, BlockTokens const& key, Row const& blocks, std::uint64_t now) {
        if (is_leaf(parent)) leaves_by_age_.erase({nodes_[index(parent)].last_used, parent});
        int child;
        if (free_nodes_.empty()) {
            child = static_cast<int>(nodes_.size());
            nodes_.push_back(Node{});
        } else {
            child = free_nodes_.back();
            free_nodes_.pop_back();
            nodes_[index(child)] = Node{};
        }
        Node& n = nodes_[index(child)];
        n.blocks = blocks;
        n.parent = parent;
        n.key = key;
        n.last_used = now;
        nodes_[index(parent)].children.emplace(key, child);
        leaves_by_age_.insert({now, child});
        for (BlockId const b : blocks) cached_blocks_ += b != no_block ? 1 : 0;
        return child;
    }

    // Returns how many blocks the removal freed (all of the node's: it was unreferenced).
    int remove_leaf(int node, BlockPool& pool) {
        Node& n = nodes_[index(node)];
        leaves_by_age_.erase({n.last_used, node});
        int freed = 0;
        for (BlockId const b : n.blocks) {
            if (b == no_block) continue;
            pool.release(b);
            ++freed;
        }
        int const parent = n.parent;
        nodes_[index(parent)].children.erase(n.key);
        n.live = false;
        n.children.clear();
        free_nodes_.push_back(node);
        cached_blocks_ -= freed;
        if (is_leaf(parent)) leaves_by_age_.insert({nodes_[index(parent)].last_used, parent});
        return freed;
    }

    std::vector<Node> nodes_;  // [0] is the root; dead nodes are reused through free_nodes_
    std::vector<int> free_nodes_;
    std::set<std::pair<std::uint64_t, int>> leaves_by_age_;  // (last_used, node), oldest first
    std::uint64_t clock_ = 0;
    int cached_blocks_ = 0;  // entries held, over all groups
    std::array<bool, Groups> strippable_;
    PrefixCacheStats stats_;
};

}  // namespace tinfer::kv
