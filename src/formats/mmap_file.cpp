// MappedFile implementation over POSIX mmap (see mmap_file.h).
#include "formats/mmap_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace duet {

Result<std::unique_ptr<MappedFile>> MappedFile::open(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return io_error(path + ": cannot open: " + std::strerror(errno));
  struct stat st;
  if (fstat(fd, &st) != 0) {
    int e = errno;
    ::close(fd);
    return io_error(path + ": cannot stat: " + std::strerror(e));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    return io_error(path + ": not a regular file");
  }
  std::unique_ptr<MappedFile> f(new MappedFile());
  f->path_ = path;
  f->size_ = static_cast<uint64_t>(st.st_size);
  if (f->size_ > 0) {
    void* p = mmap(nullptr, f->size_, PROT_READ, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) {
      int e = errno;
      ::close(fd);
      return io_error(path + ": mmap failed: " + std::strerror(e));
    }
    f->data_ = static_cast<const uint8_t*>(p);
  }
  ::close(fd);
  return f;
}

MappedFile::~MappedFile() {
  if (data_) munmap(const_cast<uint8_t*>(data_), size_);
}

void MappedFile::release(uint64_t offset, uint64_t len) const {
  if (!data_ || offset >= size_) return;
  long page = sysconf(_SC_PAGESIZE);
  uint64_t start = (offset + page - 1) / page * page;
  uint64_t end = offset + len < size_ ? offset + len : size_;
  if (end <= start) return;
  end = end / page * page;
  if (end > start) madvise(const_cast<uint8_t*>(data_) + start, end - start, MADV_DONTNEED);
}

}  // namespace duet
