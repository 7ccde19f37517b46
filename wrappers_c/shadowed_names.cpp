// shadowed_names.cpp — a library's defined dynamic symbols, read from its file (.dynsym), each
// looked up in libpaths.

#include "shadowed_names.hpp"

#include <dlfcn.h>
#include <fcntl.h>
#include <link.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>

extern "C" {
#include "paths.h"
}

namespace paths_native {

namespace {

// The file's bytes, mapped read-only for as long as it lives.
struct MappedFile {
    const unsigned char *bytes = nullptr;
    size_t size = 0;

    explicit MappedFile(const std::string &path) {
        int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
        struct stat st;
        if (fd < 0) return;
        if (fstat(fd, &st) == 0 && st.st_size > 0) {
            void *mapped = mmap(nullptr, static_cast<size_t>(st.st_size), PROT_READ, MAP_PRIVATE, fd, 0);
            if (mapped != MAP_FAILED) bytes = static_cast<const unsigned char *>(mapped), size = st.st_size;
        }
        close(fd);
    }
    ~MappedFile() {
        if (bytes) munmap(const_cast<unsigned char *>(bytes), size);
    }
    bool holds(size_t offset, size_t length) const { return offset <= size && length <= size - offset; }
};

// libpaths, loaded: what its exported symbols are looked up in.
struct Libpaths {
    Dl_info info{};
    void *handle = nullptr;

    Libpaths() {
        if (dladdr(reinterpret_cast<void *>(&paths_move), &info)) handle = dlopen(info.dli_fname, RTLD_NOW | RTLD_NOLOAD);
    }
    ~Libpaths() {
        if (handle) dlclose(handle);
    }
    bool exports(const char *name) const {
        Dl_info found;
        void *symbol = handle ? dlsym(handle, name) : nullptr;
        return symbol && dladdr(symbol, &found) && found.dli_fbase == info.dli_fbase;
    }
};

}  // namespace

std::string name_libpaths_shadows(const std::string &path) {
    MappedFile file(path);
    Libpaths libpaths;
    if (!file.holds(0, sizeof(ElfW(Ehdr)))) return "";
    auto header = reinterpret_cast<const ElfW(Ehdr) *>(file.bytes);
    if (std::memcmp(header->e_ident, ELFMAG, SELFMAG) != 0 || header->e_ident[EI_CLASS] != (__ELF_NATIVE_CLASS == 64 ? ELFCLASS64 : ELFCLASS32) ||
        header->e_shentsize != sizeof(ElfW(Shdr)) || !file.holds(header->e_shoff, header->e_shnum * sizeof(ElfW(Shdr))))
        return "";
    auto sections = reinterpret_cast<const ElfW(Shdr) *>(file.bytes + header->e_shoff);
    for (size_t s = 0; s < header->e_shnum; s++) {
        const ElfW(Shdr) &symbols = sections[s];
        if (symbols.sh_type != SHT_DYNSYM || symbols.sh_entsize != sizeof(ElfW(Sym)) ||
            symbols.sh_link >= header->e_shnum || !file.holds(symbols.sh_offset, symbols.sh_size))
            continue;
        const ElfW(Shdr) &strings = sections[symbols.sh_link];
        if (!file.holds(strings.sh_offset, strings.sh_size) || strings.sh_size == 0) continue;
        auto names = reinterpret_cast<const char *>(file.bytes + strings.sh_offset);
        auto symbol = reinterpret_cast<const ElfW(Sym) *>(file.bytes + symbols.sh_offset);
        for (size_t i = 0; i < symbols.sh_size / sizeof(ElfW(Sym)); i++, symbol++) {
            int binding = ELF64_ST_BIND(symbol->st_info), type = ELF64_ST_TYPE(symbol->st_info);
            if (symbol->st_shndx == SHN_UNDEF || symbol->st_name >= strings.sh_size ||
                (binding != STB_GLOBAL && binding != STB_WEAK) || (type != STT_FUNC && type != STT_OBJECT))
                continue;
            const char *name = names + symbol->st_name;
            if (memchr(name, 0, strings.sh_size - symbol->st_name) && libpaths.exports(name)) return name;
        }
    }
    return "";
}

}  // namespace paths_native
