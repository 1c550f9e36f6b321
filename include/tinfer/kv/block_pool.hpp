#pragma once
// The physical KV blocks of a paged cache, as bookkeeping only: which blocks are free and how
// many owners (sequence block tables, the prefix cache) each used block has. The data lives
// with the cache; keeping the pool data-free lets the prefix cache and the scheduler reason
// about memory without knowing the codec or the model shape.
#include <cstdint>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

namespace tinfer::kv {

using BlockId = std::int32_t;

class BlockPool {
  public:
    explicit BlockPool(int blocks) : ref_counts_(static_cast<std::size_t>(blocks), 0) {
        if (blocks < 0) throw std::invalid_argument("BlockPool: negative block count");
        free_list_.reserve(ref_counts_.size());
        // Pushed in reverse so the first allocations hand out blocks 0, 1, 2, ...: neighbouring
        // tokens of a fresh sequence land in neighbouring memory.
        for (BlockId b = blocks - 1; b >= 0; --b) free_list_.push_back(b);
    }

    // A free block with one owner, or nothing when every block is in use.
    std::optional<BlockId> allocate() {
        if (free_list_.empty()) return std::nullopt;
        BlockId const block = free_list_.back();
        free_list_.pop_back();
        ref_counts_[index(block)] = 1;
        return block;
    }

    // One more owner of a used block (a fork, a prefix-cache hit, the prefix cache itself).
    void retain(BlockId block) {
        check_used(block, "retain");
        ++ref_counts_[index(block)];
    }

    // One owner fewer; the last owner's release returns the block to the pool (true).
    bool release(BlockId block) {
        check_used(block, "release");
        if (--ref_counts_[index(block)] > 0) return false;
        free_list_.push_back(block);
        return true;
    }

    int ref_count(BlockId block) const { return ref_counts_.at(index(block)); }
    // Several owners: a write must copy the block first.
    bool is_shared(BlockId block) const { return ref_count(block) > 1; }

    int total_blocks() const { return static_cast<int>(ref_counts_.size()); }
    int free_blocks() const { return static_cast<int>(free_list_.size()); }
    int used_blocks() const { return total_blocks() - free_blocks(); }
    // The free blocks, next to be handed out last; for invariant checks.
    std::span<BlockId const> free_list() const { return free_list_; }

  private:
    static std::size_t index(BlockId block) { return static_cast<std::size_t>(block); }

    // Retaining or releasing a free block is a bookkeeping bug of the caller that would
    // silently corrupt another sequence's data later; fail where it happens instead.
    void check_used(BlockId block, char const* what) const {
        if (block < 0 || block >= total_blocks() || ref_counts_[index(block)] <= 0) {
            throw std::logic_error(std::string("BlockPool::") + what + " of block " +
                                   std::to_string(block) + ", which is not in use");
        }
    }

    std::vector<int> ref_counts_;     // [blocks]: owners; 0 exactly when free
    std::vector<BlockId> free_list_;  // a stack: the most recently freed block is reused first
};

}  // namespace tinfer::kv
