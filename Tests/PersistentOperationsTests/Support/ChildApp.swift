import CrashHarness
import Foundation
import Testing
@testable import PersistentOperations

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// The `crash-demo` executable built beside the test bundle, run as a child process.
enum ChildApp {
    static var executable: URL {
        get throws { try builtExecutable(named: "crash-demo") }
    }

    /// The executable product `name` of this package, built beside the test bundle.
    /// This process's environment with the Swift runtime's backtracer off: a child that
    /// crashes (the crash-loop tests' poison operations) ends at once, instead of starting a
    /// helper process that inherits its descriptors and, if the child is killed meanwhile,
    /// can keep Foundation's `Process` from ever seeing it end.
    static var withoutBacktracer: [String: String] {
        ProcessInfo.processInfo.environment.merging(["SWIFT_BACKTRACE": "enable=no"]) { $1 }
    }

    static func builtExecutable(named name: String) throws -> URL {
        var candidates = [URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent()]
        candidates.append(Bundle.main.bundleURL)
        candidates.append(Bundle.main.bundleURL.deletingLastPathComponent())
        for directory in candidates {
            let url = directory.appendingPathComponent(name)
            if FileManager.default.isExecutableFile(atPath: url.path) { return url }
        }
        throw ChildAppError("\(name) was not found beside the test bundle (looked in \(candidates.map(\.path))); build the package first")
    }

    /// Runs the executable product `name` with `arguments` to the end, in `currentDirectory`
    /// when given (else this process's), and returns its exit status and output. Blocks: call
    /// it inside ``onDedicatedThread(_:)``.
    static func run(_ name: String, _ arguments: [String], currentDirectory: URL? = nil, timeout: TimeInterval = 60) throws -> ProcessResult {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("child-output-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let outputURL = directory.appendingPathComponent("stdout")
        let errorURL = directory.appendingPathComponent("stderr")
        try Data().write(to: outputURL)
        try Data().write(to: errorURL)
        let process = Process()
        process.executableURL = try builtExecutable(named: name)
        process.environment = withoutBacktracer
        process.arguments = arguments
        if let currentDirectory { process.currentDirectoryURL = currentDirectory }
        process.standardOutput = try FileHandle(forWritingTo: outputURL)
        process.standardError = try FileHandle(forWritingTo: errorURL)
        try process.run()
        try waitForExit(process, timeout: timeout)
        return ProcessResult(
            status: process.terminationReason == .exit ? process.terminationStatus : -1,
            output: try String(contentsOf: outputURL, encoding: .utf8),
            error: try String(contentsOf: errorURL, encoding: .utf8)
        )
    }

    /// Starts `crash-demo` with `arguments`; its output goes to `output` (or is discarded).
    static func launch(_ arguments: [String], output: FileHandle? = nil) throws -> Process {
        let process = Process()
        process.executableURL = try executable
        process.arguments = arguments
        process.environment = withoutBacktracer
        process.standardOutput = output ?? FileHandle.nullDevice
        process.standardError = output ?? FileHandle.nullDevice
        try process.run()
        return process
    }

    /// Launches crash-demo with `arguments` `kills` times, SIGKILLing each launch after a
    /// random pause (microseconds) drawn from `pause` with `seed`, then once more to run to
    /// the end, which must exit with 0 within `timeout` seconds. With `afterFirstAttemptIn`,
    /// the pause starts once that effects journal shows the launch's first attempt (at most
    /// 20 s), however slowly the app starts (a sanitizer build is slow). Blocks: call it
    /// inside ``onDedicatedThread(_:)``.
    static func killRepeatedlyThenFinish(
        _ arguments: [String], kills: Int, pause: ClosedRange<UInt32>, seed: UInt64, timeout: TimeInterval,
        afterFirstAttemptIn effects: String? = nil
    ) throws {
        var random = SeededGenerator(seed: seed)
        for _ in 0..<kills {
            let app = try launch(arguments)
            if let effects {
                let started = "pid=\(app.processIdentifier)"
                let deadline = Date().addingTimeInterval(20)
                while app.isRunning, Date() < deadline,
                      !((try? String(contentsOfFile: effects, encoding: .utf8)) ?? "").contains(started) {
                    usleep(2_000)
                }
            }
            usleep(UInt32.random(in: pause, using: &random))
            kill(app.processIdentifier, SIGKILL)
            app.waitUntilExit()
        }
        let last = try launch(arguments)
        try waitForExit(last, timeout: timeout)
        guard last.terminationStatus == 0 else { throw ChildAppError("the last launch exited with \(last.terminationStatus)") }
    }

    /// Waits up to `timeout` seconds for `process` to exit; kills it and throws if it does not.
    static func waitForExit(_ process: Process, timeout: TimeInterval) throws {
        let deadline = Date().addingTimeInterval(timeout)
        while process.isRunning {
            guard Date() < deadline else {
                kill(process.processIdentifier, SIGKILL)
                process.waitUntilExit()
                throw ChildAppError("crash-demo did not exit within \(timeout) s")
            }
            usleep(5_000)
        }
        process.waitUntilExit()
    }
}

/// How a child process ended and what it printed.
struct ProcessResult: Sendable {
    /// The exit status, or -1 when a signal ended the process.
    var status: Int32
    var output: String
    var error: String

    /// Standard output parsed as a JSON object.
    func json() throws -> [String: Any] {
        guard let object = try JSONSerialization.jsonObject(with: Data(output.utf8)) as? [String: Any] else {
            throw ChildAppError("the output is not a JSON object: \(output)")
        }
        return object
    }
}

struct ChildAppError: Error, CustomStringConvertible {
    var description: String
    init(_ description: String) { self.description = description }
}

/// The payload of the demo's uploads, as the tests read it from the failed area.
struct DemoUploadJob: Codable {
    var index: Int
    var behaviour: String
    var attemptMilliseconds: Int
}

/// The effects journal a child app wrote, and the checks of the at-least-once contract.
struct EffectsJournal {
    let lines: [[Substring]]
    /// The same lines parsed by crash-demo's own reader.
    let events: [JournalEvent]

    init(path: String) throws {
        lines = try String(contentsOfFile: path, encoding: .utf8)
            .split(separator: "\n").map { $0.split(separator: " ") }
        events = try JournalTail.allEvents(at: path)
    }

    func indices(_ kind: Substring) -> [Int] {
        lines.filter { $0.first == kind && $0.count >= 2 }.compactMap { Int($0[1]) }
    }

    var launches: Int { lines.filter { $0.first == "launch" }.count }
}

/// Runs blocking work (waiting for child processes) on its own thread and returns its
/// result, so the cooperative thread pool is never blocked.
func onDedicatedThread<T: Sendable>(_ body: @escaping @Sendable () throws -> T) async throws -> T {
    try await withCheckedThrowingContinuation { continuation in
        Thread.detachNewThread {
            continuation.resume(with: Result { try body() })
        }
    }
}
