// The one writer of every output (modules/output/output_file.h): only regular files are replaced,
// temporary names are fresh and never followed, nothing is left behind by an error or a
// signal, and concurrent writers of one path leave one complete file.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "modules/output/output_file.h"
#include "tests/test_support.h"

namespace fusedlinear {
namespace {

using testing_support::list_dir;
using testing_support::read_file;
using testing_support::TempDir;

void write_plain(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::binary) << text;
}

// The OutputError a call throws ("" when it throws none).
template <typename Fn>
std::string output_error(Fn&& fn) {
  return testing_support::message_of<OutputError>(fn);
}

struct stat lstat_of(const std::string& path) {
  struct stat st {};
  EXPECT_EQ(::lstat(path.c_str(), &st), 0) << path;
  return st;
}

// Waits for `pid` to end, at most `seconds`; kills it if it does not. Returns its wait status.
int wait_for(pid_t pid, double seconds) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  int status = 0;
  while (::waitpid(pid, &status, WNOHANG) == 0) {
    if (std::chrono::steady_clock::now() > deadline) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &status, 0);
      ADD_FAILURE() << "process " << pid << " did not end in " << seconds << " s";
      return status;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  return status;
}

TEST(OutputFile, WritesNewFilesAndReplacesRegularOnesOnlyWhenTold) {
  TempDir dir;
  const std::string path = dir.file("out.json");
  write_output_file(path, "first\n", /*overwrite=*/false);
  EXPECT_EQ(read_file(path), "first\n");
  const std::string refused = output_error([&] { write_output_file(path, "second\n", false); });
  EXPECT_EQ(refused, path + ": already exists; pass --overwrite to replace it");
  EXPECT_EQ(read_file(path), "first\n");
  ASSERT_EQ(::chmod(path.c_str(), 0640), 0);
  write_output_file(path, "second\n", /*overwrite=*/true);
  EXPECT_EQ(read_file(path), "second\n");
  EXPECT_EQ(lstat_of(path).st_mode & 07777, 0640u) << "the replaced file's permissions are kept";
  EXPECT_EQ(list_dir(dir.path()), std::vector<std::string>{"out.json"}) << "no temporary left";
}

// Directories, FIFOs, sockets, symbolic links and devices are refused, with or without
// --overwrite, before and at publishing, and left exactly as they were.
TEST(OutputFile, RefusesWhatIsNotARegularFileAndLeavesItAlone) {
  TempDir dir;
  const std::string target = dir.file("target.pt");
  write_plain(target, "precious");
  struct Case {
    std::string path, expected;
  };
  std::vector<Case> cases;
  ASSERT_EQ(::mkdir(dir.file("folder").c_str(), 0755), 0);
  cases.push_back({dir.file("folder"), "is a directory"});
  ASSERT_EQ(::mkfifo(dir.file("fifo").c_str(), 0644), 0);
  cases.push_back({dir.file("fifo"), "is a FIFO (named pipe)"});
  ASSERT_EQ(::symlink(target.c_str(), dir.file("link").c_str()), 0);
  cases.push_back({dir.file("link"), "is a symbolic link (to " + target + ")"});
  ASSERT_EQ(::symlink("/nonexistent/x", dir.file("dangling").c_str()), 0);
  cases.push_back({dir.file("dangling"), "is a symbolic link"});
  const int sock = ::socket(AF_UNIX, SOCK_STREAM, 0);
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  const std::string socket_path = dir.file("socket");
  if (sock >= 0 && socket_path.size() < sizeof address.sun_path) {
    std::memcpy(address.sun_path, socket_path.c_str(), socket_path.size() + 1);
    if (::bind(sock, reinterpret_cast<sockaddr*>(&address), sizeof address) == 0) {
      cases.push_back({socket_path, "is a socket"});
    }
  }
  // A character device like /dev/null, made here: needs root (CAP_MKNOD).
  const bool have_device = ::mknod(dir.file("null").c_str(), S_IFCHR | 0666, makedev(1, 3)) == 0;
  if (have_device) cases.push_back({dir.file("null"), "is a character device"});

  for (const Case& c : cases) {
    const struct stat before = lstat_of(c.path);
    for (const bool overwrite : {false, true}) {
      const std::string message =
          output_error([&] { write_output_file(c.path, "new", overwrite); });
      EXPECT_EQ(message.rfind(c.path + ": ", 0), 0u) << message;
      EXPECT_NE(message.find(c.expected), std::string::npos) << message;
      const std::string checked = output_error([&] { check_output_path(c.path, overwrite); });
      EXPECT_NE(checked.find(c.expected), std::string::npos) << checked;
      const struct stat after = lstat_of(c.path);
      EXPECT_EQ(after.st_mode, before.st_mode) << c.path;
      EXPECT_EQ(after.st_ino, before.st_ino) << c.path;
      EXPECT_EQ(after.st_rdev, before.st_rdev) << c.path;
    }
  }
  if (sock >= 0) ::close(sock);
  EXPECT_EQ(read_file(target), "precious");
  // Nothing but what the test made is left in the folder.
  EXPECT_EQ(list_dir(dir.path()).size(), cases.size() + 1);
  if (!have_device) GTEST_SKIP() << "mknod not permitted here: the character-device case skipped";
}

// The temporary file is a fresh name opened with O_EXCL: a symbolic link planted at the fixed
// name older versions used (`<path>.tmp-fusedlinear`) or anywhere else is never written through.
TEST(OutputFile, TemporaryNamesAreFreshAndPlantedLinksAreNotFollowed) {
  TempDir dir;
  const std::string weights = dir.file("weights.pt"), report = dir.file("report.json");
  write_plain(weights, "weights");
  ASSERT_EQ(::symlink(weights.c_str(), (report + ".tmp-fusedlinear").c_str()), 0);
  write_output_file(report, "{}\n", false);
  EXPECT_EQ(read_file(weights), "weights");
  EXPECT_EQ(read_file(report), "{}\n");

  OutputFile a(dir.file("x.csv"), false), b(dir.file("x.csv"), false);
  EXPECT_NE(a.temp_path(), b.temp_path());
  EXPECT_EQ(a.temp_path().rfind(dir.path() + "/.x.csv.", 0), 0u) << a.temp_path();
  EXPECT_TRUE(S_ISREG(lstat_of(a.temp_path()).st_mode));
  a.write("a");
  a.commit();
  EXPECT_NE(output_error([&] { b.commit(); }).find("already exists"), std::string::npos);
  EXPECT_EQ(read_file(dir.file("x.csv")), "a");
  const std::vector<std::string> left = list_dir(dir.path());
  EXPECT_EQ(left.size(), 4u) << "weights, report, the planted link, x.csv";
}

TEST(OutputFile, ErrorsSayWhy) {
  TempDir dir;
  const std::string missing = dir.file("no/such/folder/out.json");
  const std::string at_write = output_error([&] { write_output_file(missing, "x", false); });
  EXPECT_EQ(at_write.rfind(missing + ": cannot write", 0), 0u) << at_write;
  EXPECT_NE(at_write.find("No such file or directory"), std::string::npos) << at_write;
  const std::string early = output_error([&] { check_output_path(missing, false); });
  EXPECT_NE(early.find("No such file or directory"), std::string::npos) << early;
  write_plain(dir.file("file"), "x");
  const std::string not_folder =
      output_error([&] { check_output_path(dir.file("file/out.json"), false); });
  EXPECT_NE(not_folder.find("is not a folder"), std::string::npos) << not_folder;
  EXPECT_NE(output_error([&] { check_output_path("", false); }).find("empty"), std::string::npos);
  const std::string input = dir.file("file");
  ASSERT_EQ(::symlink(input.c_str(), dir.file("alias").c_str()), 0);
  EXPECT_NE(output_error([&] {
              check_output_path(dir.file("alias"), true, {input});
            }).find("is also an input"),
            std::string::npos);
  if (::geteuid() != 0) {
    ASSERT_EQ(::mkdir(dir.file("locked").c_str(), 0500), 0);
    const std::string denied =
        output_error([&] { write_output_file(dir.file("locked/out.json"), "x", false); });
    EXPECT_NE(denied.find("Permission denied"), std::string::npos) << denied;
  }
}

TEST(OutputFile, SamePathIsRecognisedThroughSpellingsAndLinks) {
  TempDir dir;
  EXPECT_TRUE(same_output_path(dir.file("a.json"), dir.file("a.json")));
  EXPECT_TRUE(same_output_path(dir.file("a.json"), dir.path() + "/./a.json"));
  EXPECT_FALSE(same_output_path(dir.file("a.json"), dir.file("b.json")));
  ASSERT_EQ(::symlink(dir.path().c_str(), dir.file("alias").c_str()), 0);
  EXPECT_TRUE(same_output_path(dir.file("a.json"), dir.file("alias/a.json")));
  write_plain(dir.file("a.json"), "x");
  ASSERT_EQ(::link(dir.file("a.json").c_str(), dir.file("hard.json").c_str()), 0);
  EXPECT_TRUE(same_output_path(dir.file("a.json"), dir.file("hard.json")));
}

// A writer killed by SIGINT or SIGTERM in the middle of its write leaves no file behind: the
// temporary is removed by the handler, and the process still ends by the signal.
TEST(OutputFile, WriterKilledMidWriteLeavesNothing) {
  for (const int signal : {SIGINT, SIGTERM}) {
    TempDir dir;
    const std::string path = dir.file("out.pt");
    int ready[2];
    ASSERT_EQ(::pipe(ready), 0);
    const pid_t child = ::fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
      // As in a foreground program, whatever ran the test (a background job ignores SIGINT).
      for (const int s : {SIGINT, SIGTERM}) {
        struct sigaction current {};
        if (::sigaction(s, nullptr, &current) == 0 && current.sa_handler == SIG_IGN) {
          ::signal(s, SIG_DFL);
        }
      }
      try {
        OutputFile out(path, false);
        out.write(std::string(1 << 20, 'x'));
        if (::write(ready[1], "r", 1) != 1) ::_exit(3);
        while (true) ::pause();  // "mid-write": the signal comes now
      } catch (...) {
        ::_exit(4);
      }
    }
    ::close(ready[1]);
    char byte = 0;
    ASSERT_EQ(::read(ready[0], &byte, 1), 1) << "the writer did not start";
    ::close(ready[0]);
    ASSERT_EQ(list_dir(dir.path()).size(), 1u) << "the temporary file exists while writing";
    ::kill(child, signal);
    const int status = wait_for(child, 10);
    EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == signal) << "status " << status;
    EXPECT_EQ(list_dir(dir.path()), std::vector<std::string>{}) << strsignal(signal);
  }
}

// Processes writing the same path at once: each publishes a complete file or fails cleanly,
// the file is always one whole output, and no temporary is left.
TEST(OutputFile, ConcurrentWritersLeaveOneCompleteFile) {
  TempDir dir;
  const std::string path = dir.file("same.json");
  constexpr int kWriters = 4, kRounds = 8;
  constexpr size_t kSize = 1 << 18;
  for (const bool overwrite : {true, false}) {
    for (int round = 0; round < kRounds; ++round) {
      ::unlink(path.c_str());
      std::vector<pid_t> children;
      for (int w = 0; w < kWriters; ++w) {
        const pid_t child = ::fork();
        ASSERT_GE(child, 0);
        if (child == 0) {
          try {
            // Written in pieces, so that the writers interleave.
            OutputFile out(path, overwrite);
            const std::string piece(kSize / 16, char('a' + w));
            for (int i = 0; i < 16; ++i) out.write(piece);
            out.commit();
            ::_exit(0);
          } catch (const OutputError& e) {
            ::_exit(std::string(e.what()).find("already exists") != std::string::npos ? 1 : 2);
          } catch (...) {
            ::_exit(3);
          }
        }
        children.push_back(child);
      }
      int published = 0;
      for (const pid_t child : children) {
        const int status = wait_for(child, 60);
        ASSERT_TRUE(WIFEXITED(status)) << status;
        const int code = WEXITSTATUS(status);
        EXPECT_TRUE(code == 0 || (code == 1 && !overwrite)) << "exit " << code;
        published += code == 0;
      }
      if (overwrite) {
        EXPECT_EQ(published, kWriters);
      } else {
        EXPECT_EQ(published, 1) << "without --overwrite exactly one writer publishes";
      }
      const std::string content = read_file(path);
      ASSERT_EQ(content.size(), kSize);
      EXPECT_EQ(content, std::string(kSize, content[0])) << "one writer's whole output";
      EXPECT_EQ(list_dir(dir.path()), std::vector<std::string>{"same.json"});
    }
  }
}

}  // namespace
}  // namespace fusedlinear
