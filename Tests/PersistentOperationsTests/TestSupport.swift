import Foundation
import Testing
@testable import PersistentOperations

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// A directory under the system's temporary directory that is deleted when the value dies.
final class TemporaryDirectory: Sendable {
    let url: URL

    init() throws {
        url = FileManager.default.temporaryDirectory
            .appendingPathComponent("PersistentOperationsTests-\(UUID().uuidString)", isDirectory: true)
        try FileManager.default.createDirectory(at: url, withIntermediateDirectories: true)
    }

    deinit {
        try? FileManager.default.removeItem(at: url)
    }

    /// The store directory inside the temporary directory.
    var store: URL { url.appendingPathComponent("store", isDirectory: true) }

    func path(_ components: String...) -> String {
        components.reduce(store) { $0.appendingPathComponent($1) }.path
    }

    /// The entries of a directory of the store; none when it does not exist (a journal store
    /// has no `pending/`, `failed/` or `batches/`).
    func names(in area: String) throws -> Set<String> {
        guard FileManager.default.fileExists(atPath: path(area)) else { return [] }
        return Set(try FileManager.default.contentsOfDirectory(atPath: path(area)))
    }

    /// Appends to the store's launch file the line the crash-signal handler writes when the
    /// process crashes with `signal` (for launches simulated in-process, closed as if crashed).
    func noteCrash(signal: Int32) throws {
        let handle = try FileHandle(forWritingTo: URL(fileURLWithPath: path("attempts", "launch")))
        defer { try? handle.close() }
        try handle.seekToEnd()
        try handle.write(contentsOf: Data("crashed \(signal)\n".utf8))
    }
}

/// A payload with the kinds of values real payloads hold.
struct SamplePayload: Codable, Equatable, Sendable {
    var url: String
    var attempt: Int
    var createdAt: Date
    var tags: [String]
    var body: Data
    var ratio: Double
    var note: String?
}

extension SamplePayload {
    static let example = SamplePayload(
        url: "https://example.com/upload/items/12345",
        attempt: 3,
        createdAt: Date(timeIntervalSinceReferenceDate: 760_000_000.123_456),
        tags: ["photos", "wifi-only", "é✓"],
        body: Data((0..<64).map { UInt8($0) }),
        ratio: 0.1,
        note: nil
    )
}

/// A record with a real payload; `index` varies the fields.
func makeRecord(index: Int = 0, sequence: UInt64? = nil, priority: Int = 0) throws -> OperationRecord {
    var payload = SamplePayload.example
    payload.attempt = index
    return OperationRecord(
        typeIdentifier: "com.example.upload",
        payload: try RecordFormat.encodePayload(payload),
        priority: priority,
        enqueueSequence: sequence ?? UInt64(index + 1),
        enqueuedAt: Date(timeIntervalSinceReferenceDate: 760_000_000.5 + Double(index)),
        tags: ["batch-\(index % 3)"]
    )
}

/// Switchable faults and counters wrapped around the system file system.
final class FaultInjector: Sendable {
    struct Faults: Sendable {
        /// errno to fail `write` and `pwrite` with.
        var write: Int32?
        /// errno to fail file `fsync` and `fdatasync` with.
        var synchronize: Int32?
        /// errno to fail directory syncs with.
        var synchronizeDirectory: Int32?
        /// errno to fail every `open` for writing, `rename`, `link`, `unlink` and `mkdir` with.
        var mutation: Int32?
        /// Bytes each `write` call may write at most, to force short writes.
        var maximumWriteSize: Int?
        /// Latency added to each directory sync, in microseconds.
        var directorySyncLatency: UInt32 = 0
        /// Called inside each directory sync, after its start is counted and before it runs:
        /// a test holds a sync here to make other writers arrive while it runs.
        var duringDirectorySync: (@Sendable () -> Void)?
    }

    struct Counters: Sendable {
        var directorySyncs = 0
        var events = 0
        /// The event number at which each path was last renamed into place.
        var renamedAt: [String: Int] = [:]
        /// (directory, event number at start) of each successful directory sync.
        var completedSyncs: [(path: String, startedAt: Int)] = []
    }

    let faults = Locked(Faults())
    let counters = Locked(Counters())

    var fileSystem: FileSystem {
        let system = FileSystem.system
        var fileSystem = system
        fileSystem.write = { [self] descriptor, bytes in
            let faults = self.faults.withLock { $0 }
            if let code = faults.write { throw SystemCallError("write", code: code) }
            let count = min(bytes.count, faults.maximumWriteSize ?? bytes.count)
            return try system.write(descriptor, UnsafeRawBufferPointer(rebasing: bytes[..<count]))
        }
        fileSystem.synchronize = { [self] descriptor in
            if let code = faults.withLock({ $0.synchronize }) { throw SystemCallError("fsync", code: code) }
            try system.synchronize(descriptor)
        }
        fileSystem.writeAt = { [self] descriptor, bytes, offset in
            let faults = self.faults.withLock { $0 }
            if let code = faults.write { throw SystemCallError("pwrite", code: code) }
            let count = min(bytes.count, faults.maximumWriteSize ?? bytes.count)
            return try system.writeAt(descriptor, UnsafeRawBufferPointer(rebasing: bytes[..<count]), offset)
        }
        fileSystem.synchronizeData = { [self] descriptor in
            if let code = faults.withLock({ $0.synchronize }) { throw SystemCallError("fdatasync", code: code) }
            try system.synchronizeData(descriptor)
        }
        fileSystem.synchronizeDirectory = { [self] path in
            let faults = self.faults.withLock { $0 }
            if let code = faults.synchronizeDirectory { throw SystemCallError("fsync", path: path, code: code) }
            let start = counters.withLock { counters in
                counters.events += 1
                return counters.events
            }
            faults.duringDirectorySync?()
            if faults.directorySyncLatency > 0 { usleep(faults.directorySyncLatency) }
            try system.synchronizeDirectory(path)
            counters.withLock { counters in
                counters.directorySyncs += 1
                counters.completedSyncs.append((path, start))
            }
        }
        fileSystem.open = { [self] path, flags, mode in
            if flags & (O_WRONLY | O_RDWR | O_CREAT) != 0, let code = faults.withLock({ $0.mutation }) {
                throw SystemCallError("open", path: path, code: code)
            }
            return try system.open(path, flags, mode)
        }
        fileSystem.rename = { [self] source, destination in
            if let code = faults.withLock({ $0.mutation }) { throw SystemCallError("rename", path: source, code: code) }
            try system.rename(source, destination)
            counters.withLock { counters in
                counters.events += 1
                counters.renamedAt[destination] = counters.events
            }
        }
        fileSystem.link = { [self] existing, newName in
            if let code = faults.withLock({ $0.mutation }) { throw SystemCallError("link", path: newName, code: code) }
            try system.link(existing, newName)
        }
        fileSystem.unlink = { [self] path in
            if let code = faults.withLock({ $0.mutation }) { throw SystemCallError("unlink", path: path, code: code) }
            try system.unlink(path)
        }
        fileSystem.makeDirectory = { [self] path, mode in
            if let code = faults.withLock({ $0.mutation }) { throw SystemCallError("mkdir", path: path, code: code) }
            try system.makeDirectory(path, mode)
        }
        return fileSystem
    }
}

/// Builds a record file around `body` with a correct header and checksum.
func recordFile(body: Data, version: UInt16 = 1) -> Data {
    var file = Data(RecordFormat.magic)
    file.append(contentsOf: [UInt8(version >> 8), UInt8(version & 0xFF), 0, 0])
    let length = UInt32(body.count)
    file.append(contentsOf: [24, 16, 8, 0].map { UInt8(truncatingIfNeeded: length >> $0) })
    let crc = CRC32.checksum(of: body)
    file.append(contentsOf: [24, 16, 8, 0].map { UInt8(truncatingIfNeeded: crc >> $0) })
    file.append(body)
    return file
}

/// Waits (polling every millisecond, up to `seconds`) until `condition` holds; returns whether
/// it does. 30 s by default: in a full run, the work a test waits for can wait that long for a
/// thread; a condition that never holds still fails the test.
func eventually(seconds: TimeInterval = 30, _ condition: () throws -> Bool) async throws -> Bool {
    let deadline = Date().addingTimeInterval(seconds)
    while Date() < deadline {
        if try condition() { return true }
        try await Task.sleep(for: .milliseconds(1))
    }
    return try condition()
}

/// Whether the tests run under Thread Sanitizer (`swift test --sanitize=thread`), which makes
/// every memory access many times slower: the largest workloads are scaled down there.
let isRunningUnderThreadSanitizer: Bool = {
    #if canImport(Darwin)
    let handle = UnsafeMutableRawPointer(bitPattern: -2)   // RTLD_DEFAULT
    #else
    let handle: UnsafeMutableRawPointer? = nil               // RTLD_DEFAULT
    #endif
    return dlsym(handle, "__tsan_init") != nil
}()

/// Damages the stored bytes of record `id` in a store's journal (one byte of its identifier in
/// every segment that holds it), as a failing disk would.
func damageJournalRecord(_ id: String, in directory: TemporaryDirectory) throws {
    let journal = directory.store.appendingPathComponent("journal")
    var damaged = 0
    for name in try FileManager.default.contentsOfDirectory(atPath: journal.path) where name.hasSuffix(".segment") {
        let url = journal.appendingPathComponent(name)
        var bytes = try Data(contentsOf: url)
        guard let range = bytes.range(of: Data(id.utf8)) else { continue }
        bytes[range.lowerBound] ^= 0x20
        try bytes.write(to: url)
        damaged += 1
    }
    guard damaged > 0 else { throw ChildAppError("record \(id) is in no journal segment") }
}

/// Whether `wait` returns within `seconds`; if it does not, its task is cancelled.
func finishes(within seconds: Double, _ wait: @escaping @Sendable () async -> Void) async -> Bool {
    await withTaskGroup(of: Bool.self) { group in
        group.addTask {
            await wait()
            return !Task.isCancelled
        }
        group.addTask {
            try? await Task.sleep(for: .seconds(seconds))
            return false
        }
        let first = await group.next() ?? false
        group.cancelAll()
        return first
    }
}

/// Runs `body` on a thread of its own while every thread of the default global concurrent
/// queue is held, and returns its result, with whether the queue stayed held all along (a block
/// queued behind the holders did not run meanwhile).
///
/// On Linux those threads are also the cooperative pool's threads that run default-priority
/// tasks, the tests' own, and they wake sleeping tasks of any priority: held by blocking work
/// elsewhere in the process, they run nothing else. So `body` waits the blocking way, with
/// bounded waits (a library path that needs one of the held threads stalls until the holders
/// let go, when `body` returns); a task it starts runs at a high priority, on other threads,
/// and must not sleep. Keep it short: the whole suite waits meanwhile.
func whileTheGlobalQueueIsHeld<T: Sendable>(_ body: @escaping @Sendable () -> T) async -> (result: T, queueWasHeld: Bool) {
    await withCheckedContinuation { continuation in
        Thread.detachNewThread {
            // More holders than the pool has threads: it grows by about one thread a second
            // while they block, and every new thread takes the next holder first.
            let holders = 64
            let release = DispatchSemaphore(value: 0)
            for _ in 0..<holders {
                DispatchQueue.global().async { _ = release.wait(timeout: .now() + 60) }
            }
            let probeRan = Locked(false)
            DispatchQueue.global().async { probeRan.withLock { $0 = true } }
            let result = body()
            let queueWasHeld = !probeRan.withLock { $0 }
            for _ in 0..<holders { release.signal() }
            continuation.resume(returning: (result, queueWasHeld))
        }
    }
}

extension FileSystem {
    /// The system's file system counting its positioned reads (`pread`) in `reads`.
    static func countingReads(_ reads: Locked<Int>) -> FileSystem {
        var fileSystem = FileSystem.system
        fileSystem.readAt = { descriptor, buffer, offset in
            reads.withLock { $0 += 1 }
            return try FileSystem.system.readAt(descriptor, buffer, offset)
        }
        return fileSystem
    }

    /// The system's file system counting its flushes in `flushes`: every `fdatasync`, and with
    /// `fileSyncs` every `fsync`, with `directorySyncs` every directory sync too.
    static func countingFlushes(_ flushes: Locked<Int>, fileSyncs: Bool = false, directorySyncs: Bool = false) -> FileSystem {
        var fileSystem = FileSystem.system
        fileSystem.synchronizeData = { descriptor in
            flushes.withLock { $0 += 1 }
            try FileSystem.system.synchronizeData(descriptor)
        }
        if fileSyncs {
            fileSystem.synchronize = { descriptor in
                flushes.withLock { $0 += 1 }
                try FileSystem.system.synchronize(descriptor)
            }
        }
        if directorySyncs {
            fileSystem.synchronizeDirectory = { path in
                flushes.withLock { $0 += 1 }
                try FileSystem.system.synchronizeDirectory(path)
            }
        }
        return fileSystem
    }
}
