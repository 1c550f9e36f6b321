// Prints docs/scale-out.md's tables (paste between its generated-table markers); with the
// argument `pipeline`, the pipeline-parallelism section's.
#include <iostream>
#include <string_view>

#include "scale_out_table.hpp"

int main(int argc, char** argv) {
    namespace doc = tinfer::distributed::doc;
    bool const pipeline = argc > 1 && std::string_view(argv[1]) == "pipeline";
    std::cout << (pipeline ? doc::pipeline_tables_markdown() : doc::scale_out_tables_markdown());
}
