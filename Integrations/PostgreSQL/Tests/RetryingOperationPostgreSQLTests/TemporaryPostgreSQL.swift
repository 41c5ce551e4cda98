import Foundation
import XCTest

/// A throwaway PostgreSQL cluster for one test run: `initdb` into a temporary directory, the
/// server started on a free loopback port (its socket in that directory too), stopped and
/// deleted by ``stop()``.
///
/// The server programs are found with `pg_config --bindir`, in `/usr/lib/postgresql/*/bin`, or
/// in `POSTGRESQL_BIN`. PostgreSQL refuses to run as root: as root, the cluster is made and run
/// as the `postgres` user (`runuser`), the directory handed to it. Where no server is
/// installed the tests are skipped, unless `POSTGRESQL_REQUIRED=1` (as CI sets), when they
/// fail.
///
/// ```swift
/// let cluster = try TemporaryPostgreSQL.start()
/// defer { cluster.stop() }
/// let client = PostgresClient(configuration: cluster.configuration)
/// ```
final class TemporaryPostgreSQL: @unchecked Sendable {
    let directory: URL
    let port: Int
    let binaries: URL
    /// The user the server runs as (`nil`: this process's).
    let runAs: String?

    var dataDirectory: URL { directory.appendingPathComponent("data") }

    private init(directory: URL, port: Int, binaries: URL, runAs: String?) {
        self.directory = directory
        self.port = port
        self.binaries = binaries
        self.runAs = runAs
    }

    /// Makes and starts a cluster, or skips the test (see the type's description).
    static func start(file: StaticString = #filePath, line: UInt = #line) throws -> TemporaryPostgreSQL {
        guard let binaries = findBinaries() else {
            let message = "PostgreSQL's server programs (initdb, pg_ctl) were not found: install PostgreSQL, or set POSTGRESQL_BIN"
            if ProcessInfo.processInfo.environment["POSTGRESQL_REQUIRED"] == "1" {
                XCTFail(message, file: file, line: line)
                throw CocoaError(.fileNoSuchFile)
            }
            throw XCTSkip(message)
        }
        let directory = FileManager.default.temporaryDirectory
            .appendingPathComponent("fleet-pg-\(UUID().uuidString.prefix(8))", isDirectory: true)
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        let runAs = getuid() == 0 ? "postgres" : nil
        if let runAs {
            try run("/bin/chown", [runAs, directory.path])
        }
        let cluster = TemporaryPostgreSQL(directory: directory, port: try freePort(), binaries: binaries, runAs: runAs)
        try cluster.server("initdb", ["-D", cluster.dataDirectory.path, "-U", "postgres", "--auth=trust", "--no-sync", "-E", "UTF8"])
        try cluster.startServer()
        return cluster
    }

    /// The connection the tests use: TCP on loopback, user `postgres`, database `postgres`.
    var host: String { "127.0.0.1" }

    /// Starts the server (again, after ``stopServer(immediately:)``), on the same port.
    func startServer() throws {
        let options = "-p \(port) -k \(directory.path) -c listen_addresses=127.0.0.1 -c max_connections=200"
        try server("pg_ctl", ["-D", dataDirectory.path, "-o", options, "-l", directory.appendingPathComponent("server.log").path, "-w", "-t", "60", "start"])
    }

    /// Stops the server: `immediately`, as a crash would (no checkpoint), or after its
    /// connections closed.
    func stopServer(immediately: Bool = false) throws {
        try server("pg_ctl", ["-D", dataDirectory.path, "-m", immediately ? "immediate" : "fast", "-w", "-t", "60", "stop"])
    }

    /// Stops the server and deletes the cluster.
    func stop() {
        try? stopServer()
        try? FileManager.default.removeItem(at: directory)
    }

    private func server(_ program: String, _ arguments: [String]) throws {
        let path = binaries.appendingPathComponent(program).path
        if let runAs {
            try Self.run("/usr/sbin/runuser", ["-u", runAs, "--", path] + arguments)
        } else {
            try Self.run(path, arguments)
        }
    }

    /// Runs `executable` to its end and returns its output (standard output and error).
    ///
    /// Through ``ChildProcess`` (not Foundation's `Process`, which would wait for the server
    /// `pg_ctl start` leaves running). Output goes to a file, not a pipe, for the same reason:
    /// the server inherits it, and a pipe would never reach its end.
    @discardableResult
    private static func run(_ executable: String, _ arguments: [String]) throws -> String {
        let outputPath = FileManager.default.temporaryDirectory.appendingPathComponent("fleet-pg-output-\(UUID().uuidString)").path
        defer { try? FileManager.default.removeItem(atPath: outputPath) }
        let pid = try ChildProcess.spawn(executable, arguments, output: outputPath)
        let status = try ChildProcess.wait(pid)
        let text = (try? String(contentsOfFile: outputPath, encoding: .utf8)) ?? ""
        guard status == .exited(0) else {
            throw TemporaryPostgreSQLError(command: ([executable] + arguments).joined(separator: " "), output: text)
        }
        return text
    }

    private static func findBinaries() -> URL? {
        let manager = FileManager.default
        var candidates: [String] = []
        if let configured = ProcessInfo.processInfo.environment["POSTGRESQL_BIN"] { candidates.append(configured) }
        if let found = try? run("/usr/bin/env", ["pg_config", "--bindir"]) {
            candidates.append(found.trimmingCharacters(in: .whitespacesAndNewlines))
        }
        if let versions = try? manager.contentsOfDirectory(atPath: "/usr/lib/postgresql") {
            candidates += versions.sorted { $0.compare($1, options: .numeric) == .orderedDescending }.map { "/usr/lib/postgresql/\($0)/bin" }
        }
        return candidates.lazy.map { URL(fileURLWithPath: $0) }.first {
            manager.isExecutableFile(atPath: $0.appendingPathComponent("initdb").path)
                && manager.isExecutableFile(atPath: $0.appendingPathComponent("pg_ctl").path)
        }
    }

    /// A loopback port no socket holds now (bound to port 0, read back, closed).
    private static func freePort() throws -> Int {
        #if canImport(Glibc)
        let descriptor = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        #else
        let descriptor = socket(AF_INET, SOCK_STREAM, 0)
        #endif
        guard descriptor >= 0 else { throw POSIXError(.EMFILE) }
        defer { close(descriptor) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        address.sin_port = 0
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let bound = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { pointer in
                bind(descriptor, pointer, length) == 0 && getsockname(descriptor, pointer, &length) == 0
            }
        }
        guard bound else { throw POSIXError(.EADDRINUSE) }
        return Int(UInt16(bigEndian: address.sin_port))
    }
}

struct TemporaryPostgreSQLError: Error, CustomStringConvertible {
    let command: String
    let output: String
    var description: String { "\(command) failed:\n\(output)" }
}
