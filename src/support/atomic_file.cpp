// Atomic file writes: temporary file, fsync, rename, fsync of the folder.
#include "support/atomic_file.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <utility>

namespace tessel {
namespace {

std::string folder_of(const std::string& path) {
  const size_t slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

std::string name_of(const std::string& path) {
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

Status sync_folder(const std::string& folder) {
  const int fd = ::open(folder.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return errno_error("open folder " + folder + " to sync it");
  const int rc = ::fsync(fd);
  const int err = errno;
  ::close(fd);
  errno = err;
  if (rc != 0 && errno != EINVAL)
    return errno_error("fsync folder " + folder);  // EINVAL: not supported
  return ok_status();
}

// Removes the temporaries "." + name + ".tmp.<pid>.<n>" in `folder` that a process killed in the
// middle of a write left behind: those whose writer no longer runs on this machine. A live
// writer's file (this process's, or another's writing the same target) is left alone.
void remove_stale_temporaries(const std::string& folder, const std::string& name) {
  DIR* dir = ::opendir(folder.c_str());
  if (!dir) return;
  const std::string prefix = "." + name + ".tmp.";
  while (const dirent* e = ::readdir(dir)) {
    std::string_view entry(e->d_name);
    if (!entry.starts_with(prefix)) continue;
    std::string_view rest = entry.substr(prefix.size());
    const size_t dot = rest.find('.');
    if (dot == 0 || dot == std::string_view::npos) continue;
    long long pid = 0;
    for (char c : rest.substr(0, dot)) {
      if (c < '0' || c > '9' || pid > (1LL << 31)) {
        pid = -1;
        break;
      }
      pid = pid * 10 + (c - '0');
    }
    if (pid <= 0 || pid == ::getpid()) continue;
    if (::kill(static_cast<pid_t>(pid), 0) == 0 || errno != ESRCH) continue;  // alive, or not ours
    ::unlink((folder + "/" + std::string(entry)).c_str());
  }
  ::closedir(dir);
}

}  // namespace

Expected<AtomicFileWriter> AtomicFileWriter::open(const std::string& path) {
  if (path.empty() || path.back() == '/')
    return invalid_argument("cannot write a file at '{}'", path);
  static std::atomic<unsigned> counter{0};
  remove_stale_temporaries(folder_of(path), name_of(path));
  // A hidden name in the target's folder, unique per process and call.
  const std::string base =
      folder_of(path) + "/." + name_of(path) + ".tmp." + std::to_string(::getpid());
  for (int attempt = 0; attempt < 100; ++attempt) {
    std::string temp = base + "." + std::to_string(counter.fetch_add(1));
    const int fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd >= 0) return AtomicFileWriter(path, std::move(temp), fd);
    if (errno != EEXIST) return errno_error("create a temporary file to write " + path);
  }
  return io_error("create a temporary file to write {}: too many leftover temporary files", path);
}

AtomicFileWriter::AtomicFileWriter(AtomicFileWriter&& other) noexcept
    : path_(std::move(other.path_)), temp_path_(std::move(other.temp_path_)), fd_(other.fd_) {
  other.fd_ = -1;
}

AtomicFileWriter& AtomicFileWriter::operator=(AtomicFileWriter&& other) noexcept {
  if (this != &other) {
    abandon();
    path_ = std::move(other.path_);
    temp_path_ = std::move(other.temp_path_);
    fd_ = std::exchange(other.fd_, -1);
  }
  return *this;
}

AtomicFileWriter::~AtomicFileWriter() {
  abandon();
}

void AtomicFileWriter::abandon() {
  if (fd_ < 0) return;
  ::close(fd_);
  ::unlink(temp_path_.c_str());
  fd_ = -1;
}

Status AtomicFileWriter::write(const void* data, size_t size) {
  if (fd_ < 0) return failed_precondition("write to {} after commit or failure", path_);
  const char* p = static_cast<const char*>(data);
  while (size > 0) {
    const ssize_t n = ::write(fd_, p, size);
    if (n < 0) {
      if (errno == EINTR) continue;
      Status s = errno_error("write " + path_ + " (temporary file " + temp_path_ + ")");
      abandon();
      return s;
    }
    p += n;
    size -= static_cast<size_t>(n);
  }
  return ok_status();
}

Status AtomicFileWriter::commit() {
  if (fd_ < 0) return failed_precondition("commit of {} after commit or failure", path_);
  if (::fsync(fd_) != 0) {
    Status s = errno_error("fsync " + temp_path_ + " (for " + path_ + ")");
    abandon();
    return s;
  }
  const int fd = std::exchange(fd_, -1);
  if (::close(fd) != 0) {
    Status s = errno_error("close " + temp_path_ + " (for " + path_ + ")");
    ::unlink(temp_path_.c_str());
    return s;
  }
  if (::rename(temp_path_.c_str(), path_.c_str()) != 0) {
    Status s = errno_error("rename " + temp_path_ + " to " + path_);
    ::unlink(temp_path_.c_str());
    return s;
  }
  return sync_folder(folder_of(path_));
}

Status write_file_atomic(const std::string& path, std::string_view contents) {
  TESSEL_ASSIGN_OR_RETURN(AtomicFileWriter out, AtomicFileWriter::open(path));
  TESSEL_TRY(out.write(contents));
  return out.commit();
}

Expected<std::string> read_file(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return errno_error("open " + path);
  std::string contents;
  char chunk[1 << 16];
  for (;;) {
    const ssize_t n = ::read(fd, chunk, sizeof(chunk));
    if (n == 0) break;
    if (n < 0) {
      if (errno == EINTR) continue;
      Status s = errno_error("read " + path);
      ::close(fd);
      return s;
    }
    contents.append(chunk, static_cast<size_t>(n));
  }
  ::close(fd);
  return contents;
}

}  // namespace tessel
