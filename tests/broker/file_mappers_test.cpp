// Which processes map a file (broker/core/file_mappers.h): process_holds_file, the check a
// restarted broker makes before it re-attaches a Live slot (issue 27). A maps text names a
// file by its device (hex) and inode, an anonymous mapping never; a real process that maps
// a file, or only holds it open, holds it; one that does not, or is gone, does not.
#include "core/file_mappers.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <string>

namespace fracgpu::broker {
namespace {

FileIdentity identity(dev_t dev, ino_t ino) {
  return FileIdentity{dev, ino};
}

TEST(FileMappers, AMapsTextNamesAFileByItsDeviceInHexAndItsInode) {
  const FileIdentity f = identity(makedev(0x103, 0x2a), 4711);
  const std::string line = "7f0000000000-7f0000001000 rw-s 00000000 103:2a 4711    /run/l\n";
  EXPECT_TRUE(maps_text_names(line, f));
  EXPECT_FALSE(maps_text_names(line, identity(makedev(0x103, 0x2b), 4711)));
  EXPECT_FALSE(maps_text_names(line, identity(makedev(0x103, 0x2a), 471)));
  EXPECT_FALSE(maps_text_names(line, identity(makedev(0x103, 0x2a), 47110)));
  EXPECT_FALSE(maps_text_names("7f0000000000-7f0000001000 rw-s 00000000 259:42 4711 /run/l\n", f))
      << "the numbers are hex: 259 is 0x103 read as decimal";
  EXPECT_FALSE(
      maps_text_names("7f0000000000-7f0000001000 rw-p 00000000 00:00 0 \n", identity(0, 0)))
      << "an anonymous mapping is no file";
  EXPECT_FALSE(maps_text_names("", f));
}

class HeldFile : public ::testing::Test {
 protected:
  void SetUp() override {
    char name[] = "/tmp/fracgpu-ledger-holder-XXXXXX";
    fd_ = ::mkstemp(name);
    ASSERT_GE(fd_, 0);
    path_ = name;
    ASSERT_EQ(::ftruncate(fd_, 4096), 0);
    struct stat st {};
    ASSERT_EQ(::fstat(fd_, &st), 0);
    file_ = identity(st.st_dev, st.st_ino);
  }
  void TearDown() override {
    if (fd_ >= 0) ::close(fd_);
    ::unlink(path_.c_str());
  }
  // A child that does `how` with the file ("map", "open", "none"), then waits; its pid.
  pid_t child(const std::string& how) {
    int ready[2];
    if (::pipe(ready) != 0) return -1;
    const pid_t pid = ::fork();
    if (pid == 0) {
      ::close(ready[0]);
      const int fd = ::open(path_.c_str(), O_RDWR);
      if (how == "map") {
        if (::mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0) == MAP_FAILED)
          ::_exit(2);
        ::close(fd);
      } else if (how == "none") {
        ::close(fd);
      }
      for (int i = 3; i < 1024; ++i)  // only what `how` says: the test's own descriptors go
        if (i != ready[1] && !(how == "open" && i == fd)) ::close(i);
      (void)!::write(ready[1], "r", 1);
      ::pause();
      ::_exit(0);
    }
    ::close(ready[1]);
    char c = 0;
    (void)!::read(ready[0], &c, 1);
    ::close(ready[0]);
    children_.push_back(pid);
    return pid;
  }
  void kill_children() {
    for (pid_t p : children_) {
      ::kill(p, SIGKILL);
      ::waitpid(p, nullptr, 0);
    }
    children_.clear();
  }
  ~HeldFile() override { kill_children(); }

  int fd_ = -1;
  std::string path_;
  FileIdentity file_;
  std::vector<pid_t> children_;
};

TEST_F(HeldFile, AProcessThatMapsTheFileHoldsIt) {
  const pid_t p = child("map");
  EXPECT_EQ(process_holds_file(p, file_), std::optional<bool>(true));
}

TEST_F(HeldFile, AProcessThatOnlyHoldsItOpenHoldsItToo) {
  const pid_t p = child("open");
  EXPECT_EQ(process_holds_file(p, file_), std::optional<bool>(true));
}

TEST_F(HeldFile, AProcessWithoutItDoesNot) {
  const pid_t p = child("none");
  EXPECT_EQ(process_holds_file(p, file_), std::optional<bool>(false));
  char name[] = "/tmp/fracgpu-ledger-holder-other-XXXXXX";
  const int other = ::mkstemp(name);
  ASSERT_GE(other, 0);
  struct stat st {};
  ASSERT_EQ(::fstat(other, &st), 0);
  ::close(other);
  ::unlink(name);
  EXPECT_EQ(process_holds_file(child("map"), identity(st.st_dev, st.st_ino)),
            std::optional<bool>(false))
      << "another file of the same file system";
}

TEST_F(HeldFile, AProcessThatIsGoneDoesNot) {
  const pid_t p = child("map");
  kill_children();
  EXPECT_EQ(process_holds_file(p, file_), std::optional<bool>(false));
  EXPECT_EQ(process_holds_file(0, file_), std::optional<bool>(false));
  EXPECT_EQ(process_holds_file(-1, file_), std::optional<bool>(false));
}

}  // namespace
}  // namespace fracgpu::broker
