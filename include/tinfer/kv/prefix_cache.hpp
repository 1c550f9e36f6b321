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

template <int BlockSize>
class PrefixCache {
    static_assert(BlockSize > 0, "PrefixCache: BlockSize must be positive");

  public:
    using BlockTokens = std::array<int, BlockSize>;

    // Blocks of a cached prefix, each retained once for the caller (who now owns them).
    struct Match {
        std::vector<BlockId> blocks;
        int tokens = 0;  // blocks.size() * BlockSize
    };

    PrefixCache() { nodes_.push_back(Node{}); }  // the root: the empty prefix, no block

    // The longest cached prefix of `tokens` made of full blocks; counts a hit or a miss.
    Match match(std::span<int const> tokens, BlockPool& pool) {
        Match found;
        std::uint64_t const now = ++clock_;
        int node = root;
        for (std::size_t start = 0; start + BlockSize <= tokens.size(); start += BlockSize) {
            auto const child = nodes_[index(node)].children.find(block_tokens(tokens, start));
            if (child == nodes_[index(node)].children.end()) break;
            node = child->second;
            touch(node, now);
            pool.retain(nodes_[index(node)].block);
            found.blocks.push_back(nodes_[index(node)].block);
        }
        found.tokens = static_cast<int>(found.blocks.size()) * BlockSize;
        ++(found.tokens > 0 ? stats_.hit_requests : stats_.miss_requests);
        stats_.hit_tokens += found.tokens;
        stats_.miss_tokens += static_cast<std::int64_t>(tokens.size()) - found.tokens;
        return found;
    }

    // Caches the full blocks of `tokens` (blocks[i] holds tokens [i*BlockSize, (i+1)*BlockSize)).
    // A prefix already cached keeps its block; the sequence's own copy stays private to it.
    // Returns how many blocks became cached.
    int insert(std::span<int const> tokens, std::span<BlockId const> blocks, BlockPool& pool) {
        std::size_t const full_blocks = std::min(tokens.size() / BlockSize, blocks.size());
        std::uint64_t const now = ++clock_;
        int node = root;
        int added = 0;
        for (std::size_t i = 0; i < full_blocks; ++i) {
            BlockTokens const key = block_tokens(tokens, i * BlockSize);
            auto const existing = nodes_[index(node)].children.find(key);
            if (existing != nodes_[index(node)].children.end()) {
                node = existing->second;
                touch(node, now);
                continue;
            }
            pool.retain(blocks[i]);
            node = add_child(node, key, blocks[i], now);
            ++added;
        }
        return added;
    }

    // Frees up to `wanted` blocks that only the cache holds, least recently used first.
    // Returns how many were freed.
    int evict(int wanted, BlockPool& pool) {
        int freed = 0;
        while (freed < wanted) {
            // Leaves a sequence still uses are skipped. Evicting a leaf may make its parent a
            // leaf, so the scan starts again from the oldest each time.
            auto victim =
                std::find_if(leaves_by_age_.begin(), leaves_by_age_.end(), [&](auto const& leaf) {
                    return pool.ref_count(nodes_[index(leaf.second)].block) == 1;
                });
            if (victim == leaves_by_age_.end()) break;
            remove_leaf(victim->second, pool);
            ++freed;
        }
        return freed;
    }

    // Drops every cached block (those still used by sequences stay with them).
    void clear(BlockPool& pool) {
        for (std::size_t i = 1; i < nodes_.size(); ++i) {
            if (nodes_[i].live) pool.release(nodes_[i].block);
        }
        nodes_.assign(1, Node{});
        free_nodes_.clear();
        leaves_by_age_.clear();
        cached_blocks_ = 0;
    }

    int cached_blocks() const { return cached_blocks_; }

    // Blocks evict() could free now: cached blocks that, with their whole subtree, no sequence
    // holds (leaves go first, so a block under a used descendant stays).
    int evictable_blocks(BlockPool const& pool) const {
        int count = 0;
        auto const visit = [&](auto const& self, int node) -> bool {
            bool subtree_unused = true;
            for (auto const& entry : nodes_[index(node)].children) {
                subtree_unused = self(self, entry.second) && subtree_unused;
            }
            if (node == root) return subtree_unused;
            bool const evictable = subtree_unused && pool.ref_count(nodes_[index(node)].block) == 1;
            count += evictable ? 1 : 0;
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
            if (nodes_[i].live) f(nodes_[i].block);
        }
    }

  private:
    static constexpr int root = 0;
    static constexpr int no_parent = -1;

    struct Node {
        BlockId block = -1;
        int parent = no_parent;
        BlockTokens key{};  // the tokens this block holds, its key in the parent's children
        std::map<BlockTokens, int> children;
        std::uint64_t last_used = 0;
        bool live = true;
    };

    static std::size_t index(int node) { return static_cast<std::size_t>(node); }

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

    int add_child(int parent, BlockTokens const& key, BlockId block, std::uint64_t now) {
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
        n.block = block;
        n.parent = parent;
        n.key = key;
        n.last_used = now;
        nodes_[index(parent)].children.emplace(key, child);
        leaves_by_age_.insert({now, child});
        ++cached_blocks_;
        return child;
    }

    void remove_leaf(int node, BlockPool& pool) {
        Node& n = nodes_[index(node)];
        leaves_by_age_.erase({n.last_used, node});
        pool.release(n.block);
        int const parent = n.parent;
        nodes_[index(parent)].children.erase(n.key);
        n.live = false;
        n.children.clear();
        free_nodes_.push_back(node);
        --cached_blocks_;
        if (is_leaf(parent)) leaves_by_age_.insert({nodes_[index(parent)].last_used, parent});
    }

    std::vector<Node> nodes_;  // [0] is the root; dead nodes are reused through free_nodes_
    std::vector<int> free_nodes_;
    std::set<std::pair<std::uint64_t, int>> leaves_by_age_;  // (last_used, node), oldest first
    std::uint64_t clock_ = 0;
    int cached_blocks_ = 0;
    PrefixCacheStats stats_;
};

}  // namespace tinfer::kv
