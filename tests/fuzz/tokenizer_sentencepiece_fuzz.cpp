// libFuzzer target: Gemma 3's SentencePiece tokenizer, built from the real model file
// (TINFER_GEMMA3_PATH), under the checks of tokenizer_fuzz.hpp.
#include <cstddef>
#include <cstdint>

#include <tinfer/tokenizer/tokenizer_gguf.hpp>

#include "tokenizer_fuzz.hpp"

namespace {
tinfer::tok::Tokenizer const* tokenizer = nullptr;
}

extern "C" int LLVMFuzzerInitialize(int*, char***) {
    tokenizer = new tinfer::tok::Tokenizer(
        tinfer::tok::tokenizer_from_gguf(fuzz::open_model("TINFER_GEMMA3_PATH")));
    FUZZ_CHECK(tokenizer->model() == tinfer::tok::TokenizerModel::sentencepiece,
               "TINFER_GEMMA3_PATH's tokenizer is not SentencePiece");
    return 0;
}

extern "C" int LLVMFuzzerTestOneInput(std::uint8_t const* data, std::size_t size) {
    fuzz::fuzz_tokenizer(*tokenizer, data, size);
    return 0;
}
