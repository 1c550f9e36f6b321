// The translation unit that builds the tests' precompiled Boost.Test header (tests/CMakeLists.txt).
