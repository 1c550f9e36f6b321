#pragma once
// The public-domain texts of tests/data/text that perplexity measurements read (KV codecs in
// bench/kv_bench, eviction policies in tests/model), and how they are joined into one text.
#include <fstream>
#include <iterator>
#include <stdexcept>
#include <string>
#include <vector>

namespace tinfer::testing {

// The corpus, in reading order, under `text_dir` (tests/data/text).
inline std::vector<std::string> corpus_paths(std::string const& text_dir) {
    return {text_dir + "/declaration_of_independence.txt", text_dir + "/gettysburg_address.txt",
            text_dir + "/constitution_article_1.txt"};
}

// The files' texts, trailing blanks trimmed, joined by a blank line.
inline std::string read_texts(std::vector<std::string> const& paths) {
    std::string text;
    for (std::string const& path : paths) {
        std::ifstream in(path, std::ios::binary);
        if (!in) throw std::runtime_error("cannot read " + path);
        if (!text.empty()) text += "\n\n";
        text.append(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
        while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.pop_back();
    }
    return text;
}

}  // namespace tinfer::testing
