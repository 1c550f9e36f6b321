// describe: prints any GGUF's model description as the C++ that compiles its shape, so a
// researcher can instantiate the file's shape (`constexpr tinfer::ModelConfig ...`), the
// tensor types it mixes, and whether the tools' compiled-in shapes already cover it.
//
//   describe --model FILE.gguf
#include <iostream>
#include <map>
#include <string>

#include <CLI/CLI.hpp>

#include <tinfer/gguf/gguf.hpp>
#include <tinfer/model/hyperparameters.hpp>
#include <tinfer/model/shipped_presets.hpp>

int main(int argc, char** argv) {
    CLI::App app{"Prints a GGUF model's shape as a constexpr tinfer::ModelConfig"};
    std::string path;
    app.add_option("-m,--model", path, "The GGUF file")->required();
    CLI11_PARSE(app, argc, argv);
    try {
        auto const file = tinfer::gguf::File::open(path);
        std::cout << tinfer::model::cpp_initializer(tinfer::model::read_config(file)) << "\n";
        std::map<std::string, int> types;
        for (auto const& t : file.tensors()) ++types[tinfer::model::type_name(t.type)];
        std::cout << "// tensors:";
        for (auto const& [type, count] : types) std::cout << " " << type << " x" << count;
        std::cout << "\n// compiled into the tools: ";
        try {
            tinfer::model::with_shipped_preset(
                file, []<tinfer::ModelConfig Cfg>() { std::cout << "yes, " << Cfg << "\n"; });
        } catch (tinfer::Error const&) {
            std::cout << "no (add the line above to include/tinfer/model/shipped_presets.hpp)\n";
        }
    } catch (std::exception const& e) {
        std::cerr << "describe: " << e.what() << "\n";
        return 1;
    }
}
