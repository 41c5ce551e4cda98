import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// Child processes started with `posix_spawn` and reaped with `waitpid`.
///
/// Not Foundation's `Process`: on Linux it learns of its child's end through a descriptor the
/// child inherits, so a daemon the child leaves running (the server `pg_ctl start` starts)
/// keeps `waitUntilExit()` waiting forever.
enum ChildProcess {
    /// How a child ended.
    enum Status: Equatable {
        case exited(Int32)
        case signalled(Int32)
    }

    /// Starts `executable` with `arguments`, its standard input `/dev/null`, its standard
    /// output and error appended to the file `output` (made when missing).
    static func spawn(_ executable: String, _ arguments: [String], output: String) throws -> pid_t {
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0)
        posix_spawn_file_actions_addopen(&actions, 1, output, O_WRONLY | O_CREAT | O_APPEND, 0o644)
        posix_spawn_file_actions_adddup2(&actions, 1, 2)
        let argv: [UnsafeMutablePointer<CChar>?] = ([executable] + arguments).map { strdup($0) } + [nil]
        defer { argv.forEach { free($0) } }
        var pid = pid_t()
        let spawned = posix_spawn(&pid, executable, &actions, nil, argv, environ)
        guard spawned == 0 else {
            throw TemporaryPostgreSQLError(command: executable, output: "posix_spawn: \(String(cString: strerror(spawned)))")
        }
        return pid
    }

    /// Waits for the child `pid` to end.
    static func wait(_ pid: pid_t) throws -> Status {
        var status: Int32 = 0
        while waitpid(pid, &status, 0) == -1 {
            guard errno == EINTR else { throw POSIXError(POSIXErrorCode(rawValue: errno) ?? .ECHILD) }
        }
        // The low seven bits: the signal that ended it (0: it exited, its status above them).
        let signal = status & 0x7f
        return signal == 0 ? .exited((status >> 8) & 0xff) : .signalled(signal)
    }

    /// An executable product of this package, built beside the test bundle.
    static func builtExecutable(named name: String) throws -> String {
        let candidates = [
            URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent(),
            Bundle.main.bundleURL,
            Bundle.main.bundleURL.deletingLastPathComponent(),
        ]
        for directory in candidates {
            let path = directory.appendingPathComponent(name).path
            if FileManager.default.isExecutableFile(atPath: path) { return path }
        }
        throw TemporaryPostgreSQLError(command: name, output: "not found beside the test bundle (looked in \(candidates.map(\.path))): build the package first")
    }
}
