// Gemma 3 270M's serving engines, one per KV codec pair (serving_engines.hpp).
#include "serving_engines.hpp"

namespace tinfer {

template class Engine<model::Llama<presets::gemma3_270m>, examples::Serving, Host,
                      PagedKv<16, kv::Fp32Codec, kv::Fp32Codec>>;
template class Engine<model::Llama<presets::gemma3_270m>, examples::Serving, Host,
                      PagedKv<16, kv::Fp16Codec, kv::Fp16Codec>>;
template class Engine<model::Llama<presets::gemma3_270m>, examples::Serving, Host,
                      PagedKv<16, kv::Bf16Codec, kv::Bf16Codec>>;
template class Engine<model::Llama<presets::gemma3_270m>, examples::Serving, Host,
                      PagedKv<16, kv::Fp8E4M3Codec, kv::Fp8E4M3Codec>>;
template class Engine<model::Llama<presets::gemma3_270m>, examples::Serving, Host,
                      PagedKv<16, kv::Fp8E5M2Codec, kv::Fp8E5M2Codec>>;
template class Engine<model::Llama<presets::gemma3_270m>, examples::Serving, Host,
                      PagedKv<16, kv::Int8Codec, kv::Int8Codec>>;
template class Engine<model::Llama<presets::gemma3_270m>, examples::Serving, Host,
                      PagedKv<16, kv::Int4Codec, kv::Int4Codec>>;
template class Engine<model::Llama<presets::gemma3_270m>, examples::Serving, Host,
                      PagedKv<16, kv::Int8Codec, kv::Int4Codec>>;
// serve --draft-model's.
template class Engine<model::Llama<presets::gemma3_270m>, examples::Serving, Host, PagedKv<16>,
                      spec::DraftModelDrafter<model::Llama<presets::gemma3_270m>>>;

}  // namespace tinfer
