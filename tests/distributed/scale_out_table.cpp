// Prints docs/scale-out.md's tables (paste between its generated-table markers).
#include <iostream>

#include "scale_out_table.hpp"

int main() {
    std::cout << tinfer::distributed::doc::scale_out_tables_markdown();
}
