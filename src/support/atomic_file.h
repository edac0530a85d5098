// Writing files so that readers, other processes and crashes see either the old file or the whole
// new one, never a part: checkpoints, the JIT cache, measured-hardware caches.
//
//   TESSEL_TRY(write_file_atomic("/cache/k.so", bytes));
//
//   TESSEL_ASSIGN_OR_RETURN(AtomicFileWriter out, AtomicFileWriter::open("ckpt.safetensors"));
//   TESSEL_TRY(out.write(header));            // as many writes as needed
//   TESSEL_TRY(out.commit());                 // only now does ckpt.safetensors change
//
// How: the data goes to a new temporary file in the same folder (same file system, so the rename
// is atomic), which is fsync'ed, renamed over the target, and then the folder is fsync'ed so the
// rename itself survives a power cut. Concurrent writers of one path each use their own temporary
// file; the last rename wins. A writer destroyed before commit() removes its temporary file.
// Temporaries of a writer that was killed (its process no longer runs) are removed by the next
// open() of the same path.
// Every failure is an io_error naming the path and the system's reason.
#pragma once

#include <string>
#include <string_view>

#include "support/status.h"

namespace tessel {

Status write_file_atomic(const std::string& path, std::string_view contents);

// The whole file (for reading back what was written, small files, tests).
Expected<std::string> read_file(const std::string& path);

class AtomicFileWriter {
 public:
  static Expected<AtomicFileWriter> open(const std::string& path);
  AtomicFileWriter(AtomicFileWriter&& other) noexcept;
  AtomicFileWriter& operator=(AtomicFileWriter&& other) noexcept;
  ~AtomicFileWriter();  // removes the temporary file unless committed

  Status write(const void* data, size_t size);
  Status write(std::string_view text) { return write(text.data(), text.size()); }
  // Makes the written bytes the contents of path(). The writer cannot be used afterwards.
  Status commit();

  const std::string& path() const { return path_; }

 private:
  AtomicFileWriter(std::string path, std::string temp_path, int fd)
      : path_(std::move(path)), temp_path_(std::move(temp_path)), fd_(fd) {}
  void abandon();

  std::string path_;
  std::string temp_path_;
  int fd_ = -1;
};

}  // namespace tessel
