#pragma once
// A whole file mapped read-only into memory (POSIX mmap). The mapping's address never changes,
// so spans into it stay valid when a MappedFile is moved.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstring>
#include <filesystem>
#include <span>
#include <string>
#include <utility>

#include <tinfer/core/error.hpp>

namespace tinfer::gguf {

class MappedFile {
  public:
    MappedFile() = default;

    static MappedFile open(std::filesystem::path const& path) {
        int const fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
        if (fd < 0) throw Error("cannot open '" + path.string() + "': " + std::strerror(errno));
        struct stat info {};
        if (::fstat(fd, &info) != 0) {
            int const saved = errno;
            ::close(fd);
            throw Error("cannot stat '" + path.string() + "': " + std::strerror(saved));
        }
        MappedFile file;
        file.size_ = static_cast<std::size_t>(info.st_size);
        // mmap refuses a zero length; an empty file simply has no bytes.
        if (file.size_ > 0) {
            void* const address = ::mmap(nullptr, file.size_, PROT_READ, MAP_PRIVATE, fd, 0);
            if (address == MAP_FAILED) {
                int const saved = errno;
                ::close(fd);
                throw Error("cannot map '" + path.string() + "': " + std::strerror(saved));
            }
            file.address_ = address;
        }
        ::close(fd);  // the mapping keeps the file referenced
        return file;
    }

    MappedFile(MappedFile&& other) noexcept
        : address_(std::exchange(other.address_, nullptr)), size_(std::exchange(other.size_, 0)) {}
    MappedFile& operator=(MappedFile&& other) noexcept {
        if (this != &other) {
            unmap();
            address_ = std::exchange(other.address_, nullptr);
            size_ = std::exchange(other.size_, 0);
        }
        return *this;
    }
    MappedFile(MappedFile const&) = delete;
    MappedFile& operator=(MappedFile const&) = delete;
    ~MappedFile() { unmap(); }

    std::span<std::byte const> bytes() const {
        return {static_cast<std::byte const*>(address_), size_};
    }

  private:
    void unmap() {
        if (address_ != nullptr) ::munmap(address_, size_);
        address_ = nullptr;
        size_ = 0;
    }

    void* address_ = nullptr;
    std::size_t size_ = 0;
};

}  // namespace tinfer::gguf
