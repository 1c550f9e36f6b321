#pragma once
#include <concepts>

namespace tinfer {

// Backend tags: every kernel has one implementation per tag behind the same signature.
struct Host {};
struct Cuda {};

template <class B>
concept Backend = std::same_as<B, Host> || std::same_as<B, Cuda>;

}  // namespace tinfer
