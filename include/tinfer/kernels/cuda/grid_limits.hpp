#pragma once
// CUDA's grid limits and the launch shapes that respect them, as plain arithmetic (no CUDA
// header), so a host test checks exactly what the launchers and kernels compute.
//
// A grid holds at most 2^31 - 1 blocks along x and 65,535 along y and z. A kernel with one
// block per item along y (a token's RoPE row, one block copy) must not launch `items` blocks
// there: past 65,535 the launch fails. Such kernels launch strided_grid_y(items) blocks and
// each block walks strided_items(blockIdx.y, gridDim.y, items): block b handles b, b + blocks,
// b + 2 blocks, ..., so every item is handled by exactly one block whatever the count.
#include <cstdint>

#include <tinfer/core/host_device.hpp>

namespace tinfer::kernels::cuda {

inline constexpr std::uint64_t max_grid_x = 2147483647;  // 2^31 - 1
inline constexpr unsigned max_grid_yz = 65535;

// Blocks along y for a kernel that strides over `items` items (0 for none).
constexpr unsigned strided_grid_y(int items) {
    if (items <= 0) return 0;
    return static_cast<unsigned>(items) < max_grid_yz ? static_cast<unsigned>(items) : max_grid_yz;
}

// Blocks along x for a grid-stride loop over `items` items of `threads` per block: one per
// `threads` items, capped where the device is full anyway (each block then loops); 0 for none.
inline constexpr std::int64_t max_grid_stride_blocks = 4096;
constexpr int grid_stride_blocks(std::int64_t items, int threads) {
    if (items <= 0 || threads <= 0) return 0;
    std::int64_t const wanted = (items + threads - 1) / threads;
    return static_cast<int>(wanted < max_grid_stride_blocks ? wanted : max_grid_stride_blocks);
}

// Whether a grid of (x, y, z) blocks can be launched at all.
constexpr bool grid_fits(std::uint64_t x, std::uint64_t y, std::uint64_t z) {
    return x >= 1 && y >= 1 && z >= 1 && x <= max_grid_x && y <= max_grid_yz && z <= max_grid_yz;
}

// The items one block handles in a strided loop: first, first + step, ... below end. Counted in
// 64 bits, so the last step cannot overflow an int near its limit.
class StridedItems {
  public:
    class Iterator {
      public:
        TINFER_HOST_DEVICE int operator*() const { return static_cast<int>(item_); }
        TINFER_HOST_DEVICE Iterator& operator++() {
            item_ += step_;
            return *this;
        }
        TINFER_HOST_DEVICE bool operator!=(Iterator const& end) const { return item_ < end.item_; }

      private:
        friend class StridedItems;
        TINFER_HOST_DEVICE Iterator(std::int64_t item, std::int64_t step)
            : item_(item), step_(step) {}
        std::int64_t item_;
        std::int64_t step_;
    };

    TINFER_HOST_DEVICE StridedItems(unsigned first, unsigned step, int end)
        : first_(first), step_(step < 1 ? 1 : step), end_(end) {}
    TINFER_HOST_DEVICE Iterator begin() const { return {first_, step_}; }
    TINFER_HOST_DEVICE Iterator end() const { return {end_, step_}; }

  private:
    std::int64_t first_;
    std::int64_t step_;
    std::int64_t end_;
};

// In a kernel: for (int row : strided_items(blockIdx.y, gridDim.y, rows)) { ... }
TINFER_HOST_DEVICE inline StridedItems strided_items(unsigned block, unsigned blocks, int items) {
    return {block, blocks, items};
}

}  // namespace tinfer::kernels::cuda
