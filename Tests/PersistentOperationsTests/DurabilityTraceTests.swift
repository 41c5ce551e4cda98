import Foundation
import Testing
@testable import PersistentOperations

/// The system calls of one durable add and one removal, traced with strace in a child
/// process: the order that makes a change survive power loss, and the modes of new files.
@Suite(
    "Durability trace", .timeLimit(.minutes(2)),
    .enabled(if: Strace.isUsable, "strace is not installed or cannot trace here (ptrace not permitted); install it with `apt-get install strace`")
)
struct DurabilityTraceTests {
    @Test func anAddIsWrittenToTheJournalAndFlushedBeforeItReturnsAndARemovalIsWrittenBeforeItIsReported() async throws {
        // Given a child process that adds one operation and lets it run, under strace
        let directory = try TemporaryDirectory()
        let tracePath = directory.url.appendingPathComponent("trace.txt").path
        let status = try await onDedicatedThread { () -> Int32 in
            let process = Process()
            process.executableURL = URL(fileURLWithPath: Strace.path!)
            process.arguments = [
                "-f", "-qq", "-o", tracePath,
                "-e", "trace=openat,write,pwrite64,fsync,fdatasync,rename,renameat,renameat2,unlink,unlinkat",
                try ChildApp.executable.path, "durability-probe", "--store", directory.store.path,
            ]
            process.standardOutput = FileHandle.nullDevice
            process.standardError = FileHandle.nullDevice
            try process.run()
            try ChildApp.waitForExit(process, timeout: 60)
            return process.terminationStatus
        }
        #expect(status == 0)
        let trace = try Strace.Trace(contentsOf: tracePath)
        let store = StoreLayout(directory: directory.store)
        let journal = store.root + "/journal/"
        let isSegment = { (call: Strace.Call) in call.filePath?.hasPrefix(journal) == true && call.filePath?.hasSuffix(".segment") == true }

        // Then the add: its frame is written to the journal's segment and the segment flushed,
        // and only then does `addOperation` return ("added" on standard output)
        let added = try #require(trace.index { $0.name == "write" && $0.fileDescriptor == 1 && $0.arguments.contains("\"added ") })
        let frames = trace.calls.indices.filter { trace.calls[$0].name == "pwrite64" && isSegment(trace.calls[$0]) }
        let write = try #require(frames.last { $0 < added }, "no frame written before the add returned")
        let sync = try #require(trace.index(after: write) { ["fsync", "fdatasync"].contains($0.name) && isSegment($0) })
        #expect(sync < added, "addOperation returned before the journal was flushed")

        // And the removal: its frame is written before it is reported removed (a process crash
        // keeps it). By design it does not wait for a flush of its own: the next commit's flush,
        // or the writer's flush delay, carries it to disk, and a power cut before then may run
        // the completed operation again (at least once).
        let removedLine = try #require(trace.index { $0.name == "write" && $0.fileDescriptor == 1 && $0.arguments.contains("\"removed ") })
        let removal = try #require(frames.first { $0 > added }, "no frame written after the add")
        #expect(removal < removedLine, "the removal was reported before its frame was written")

        // And no file of the store was ever created with a mode wider than 0600
        let creations = trace.calls.filter { $0.name == "openat" && $0.arguments.contains("O_CREAT") && $0.path?.hasPrefix(store.root + "/") == true }
        #expect(creations.count >= 2)
        for call in creations {
            let mode = try #require(call.creationMode, "no mode in \(call.arguments)")
            #expect(mode & ~0o600 == 0, "\(call.path ?? "") created with mode \(String(mode, radix: 8))")
        }
        print("durability trace: add = pwrite(segment) → fdatasync(segment) → return (calls \(write), \(sync), \(added)); removal = pwrite(segment) → event (calls \(removal), \(removedLine)); \(creations.count) files created, none wider than 0600")
    }
}

/// Finding and reading strace.
enum Strace {
    static let path: String? = {
        let directories = (ProcessInfo.processInfo.environment["PATH"] ?? "/usr/bin:/bin").split(separator: ":")
        return directories.map { "\($0)/strace" }.first { FileManager.default.isExecutableFile(atPath: $0) }
    }()

    /// Whether strace exists and may trace a child here (ptrace can be forbidden in containers).
    static let isUsable: Bool = {
        guard let path else { return false }
        let process = Process()
        process.executableURL = URL(fileURLWithPath: path)
        process.arguments = ["-f", "-qq", "-o", "/dev/null", "/bin/true"]
        process.standardOutput = FileHandle.nullDevice
        process.standardError = FileHandle.nullDevice
        guard (try? process.run()) != nil else { return false }
        process.waitUntilExit()
        return process.terminationStatus == 0
    }()

    /// One traced call, with the file each descriptor argument stood for at that moment.
    struct Call {
        var name: String
        var arguments: String
        var result: String
        /// The path of the file descriptor argument (write, fsync), from the last `openat` that returned it.
        var filePath: String?

        /// The first quoted argument.
        var path: String? { quoted.first }
        /// The second quoted argument (the destination of a rename).
        var secondPath: String? { quoted.count > 1 ? quoted[1] : nil }
        var isRename: Bool { name.hasPrefix("rename") }
        var isUnlink: Bool { name.hasPrefix("unlink") }

        var fileDescriptor: Int32? {
            Int32(arguments.prefix { $0 != "," && $0 != ")" }.trimmingCharacters(in: .whitespaces))
        }

        /// The mode argument of an `openat` with `O_CREAT`.
        var creationMode: Int? {
            guard let last = arguments.split(separator: ",").last?.trimmingCharacters(in: .whitespaces),
                  last.hasPrefix("0") else { return nil }
            return Int(last, radix: 8)
        }

        private var quoted: [String] {
            arguments.split(separator: "\"", omittingEmptySubsequences: false).enumerated()
                .filter { $0.offset % 2 == 1 }.map { String($0.element) }
        }
    }

    struct Trace {
        var calls: [Call] = []

        /// Reads `strace -f -o` output, joining calls that other threads interrupted.
        init(contentsOf path: String) throws {
            var unfinished: [Substring: String] = [:]
            var descriptors: [String: String] = [:]
            for rawLine in try String(contentsOfFile: path, encoding: .utf8).split(separator: "\n") {
                guard let space = rawLine.firstIndex(of: " ") else { continue }
                let pid = rawLine[..<space]
                var line = rawLine[rawLine.index(after: space)...].trimmingCharacters(in: .whitespaces)
                if line.hasSuffix("<unfinished ...>") {
                    unfinished[pid] = String(line.dropLast("<unfinished ...>".count))
                    continue
                }
                if line.hasPrefix("<... "), let close = line.range(of: "resumed>") {
                    line = (unfinished.removeValue(forKey: pid) ?? "") + line[close.upperBound...]
                }
                // strace pads the result column: `fsync(4)            = 0`.
                guard let open = line.firstIndex(of: "("), let equals = line.range(of: " = ", options: .backwards) else { continue }
                let head = line[..<equals.lowerBound].trimmingCharacters(in: .whitespaces)
                guard head.hasSuffix(")"), let headOpen = head.firstIndex(of: "(") else { continue }
                let name = String(line[..<open])
                let arguments = String(head[head.index(after: headOpen)..<head.index(before: head.endIndex)])
                let result = String(line[equals.upperBound...])
                var call = Call(name: name, arguments: arguments, result: result)
                if let descriptor = call.fileDescriptor, ["write", "pwrite64", "fsync", "fdatasync"].contains(name) {
                    call.filePath = descriptors["\(descriptor)"]
                }
                if name == "openat", let path = call.path, let descriptor = Int32(result.prefix { $0.isNumber }) {
                    descriptors["\(descriptor)"] = path
                }
                calls.append(call)
            }
        }

        func index(after start: Int, where matches: (Call) -> Bool) -> Int? {
            calls.indices.first { $0 > start && matches(calls[$0]) }
        }

        func index(where matches: (Call) -> Bool) -> Int? {
            index(after: -1, where: matches)
        }
    }
}
