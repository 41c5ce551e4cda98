import Foundation
import PersistentOperations

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// P5: how long a launch takes to restore many pending records, and the memory it needs.
///
/// A store is filled through the public API with pending records of the typical payload
/// (a suspended queue, then `close()`). Each measurement runs in a child process of its
/// own — the benchmark binary started again with a hidden command — so that its peak
/// resident memory is its own, not that of the benchmarks that ran before:
///
/// - **restore:** open a `PersistentOperationQueue` on the store with the type registered
///   and its `OperationQueue` suspended, and time `restore()`: reading, verifying (CRC-32,
///   structure) and decoding every record (not its payload) and scheduling it (nothing runs;
///   each operation is built from its payload when it is due).
/// - **baseline, bare read + decode:** list the same directory, read each file whole
///   (`open`, `fstat`, `read`), skip the 20-byte header, decode the body with
///   `PropertyListDecoder` into a plain `Decodable` struct with the record's fields, and
///   decode its payload field with `PropertyListDecoder` into the payload type; keep the
///   results in an array. No checksum, no verification, no operations.
///
/// Both sides read files that were just written, so they come from the page cache. Rounds
/// alternate which side goes first; each figure is the median of its rounds and the
/// ratio is the median of the rounds' ratios. Peak memory is the child's peak resident set
/// (`VmHWM`) after the restore, with the whole process (the runtime, Foundation) included.
struct RestoreBenchmark: Benchmark {
    let id = "P5"
    let title = "restore of many pending records vs bare read + decode of the same files, and peak memory"

    /// The hidden command that runs one measurement in a child process.
    static let childCommand = "--p5-child"

    func run(in context: BenchmarkContext) throws -> [BenchmarkResult] {
        let sizes = context.size(full: [10_000, 100_000], smoke: [1_000, 2_000])
        let rounds = context.size(full: 3, smoke: 1)
        var rows: [BenchmarkResult] = []
        for count in sizes {
            let directory = try TemporaryDirectory("p5-\(count)")
            defer { directory.remove() }
            let writeStart = Timing.now()
            try StoreFixture.writePendingRecords(count, to: directory.url, producers: 16)
            context.progress(String(format: "wrote %@ records in %.1f s", count.groupedDigits, Timing.seconds(from: writeStart, to: Timing.now())))

            var restores: [ChildMeasurement] = []
            var bares: [ChildMeasurement] = []
            for round in 0..<rounds {
                if round.isMultiple(of: 2) {
                    restores.append(try Self.measureInChild(.restore, directory: directory.url, count: count))
                    bares.append(try Self.measureInChild(.bare, directory: directory.url, count: count))
                } else {
                    bares.append(try Self.measureInChild(.bare, directory: directory.url, count: count))
                    restores.append(try Self.measureInChild(.restore, directory: directory.url, count: count))
                }
                context.progress(String(
                    format: "%@ records, round %d: restore %.3f s (peak %.1f MB), bare read + decode %.3f s (peak %.1f MB)",
                    count.groupedDigits, round + 1, restores[round].seconds, restores[round].peakMegabytes,
                    bares[round].seconds, bares[round].peakMegabytes
                ))
            }
            let label = count >= 1_000 && count.isMultiple(of: 1_000) ? "\(count / 1_000)k" : "\(count)"
            let restoreSeconds = restores.map(\.seconds).median
            rows.append(BenchmarkResult(
                id: "\(id).\(label)",
                name: "restore \(count.groupedDigits) pending records",
                value: restoreSeconds,
                unit: .seconds,
                baseline: bares.map(\.seconds).median,
                baselineName: "bare read + decode",
                ratio: zip(restores, bares).map { $0.seconds / $1.seconds }.median,
                target: .ratio(atMost: 1.5),
                note: "median of \(rounds) round(s), each side in a fresh child process; "
                    + "\(Int(Double(count) / restoreSeconds).groupedDigits) records/s; OperationQueue suspended, nothing runs"
            ))
            rows.append(BenchmarkResult(
                id: "\(id).\(label).rss",
                name: "peak memory, restore of \(count.groupedDigits) records",
                value: restores.map(\.peakMegabytes).max() ?? .nan,
                unit: .megabytes,
                baseline: bares.map(\.peakMegabytes).max(),
                baselineName: "bare read + decode",
                target: count >= 100_000 ? .value(atMost: 150) : nil,
                note: String(format: "peak resident set of the child process, largest of its rounds; a process that only starts up: %.1f MB",
                             restores.map(\.startMegabytes).median)
            ))
        }
        return rows
    }

    // MARK: Child process

    enum Side: String {
        case restore
        case bare
        /// Not a measurement: fills a new store, for profiling the other two by hand.
        case write
        /// `ReadOnlyPersistentStore.counts()` of the store (M3).
        case counts
        /// Adds `COUNT` operations to a new store in this process (batches of 10,000, a
        /// suspended queue) and keeps the queue open (M4: memory after adding).
        case add
        /// Restores the store's `COUNT` pending operations (queue suspended), then times
        /// ``latencySamples`` durable adds one at a time; reports the median add (M5).
        case latency
        /// Restores the store's `COUNT` pending operations, then lets the queue run until
        /// ``drainedOperations(of:)`` have completed, in ``drainChunks`` chunks; reports the
        /// median time a chunk took (M6).
        case drain
    }

    /// How many adds ``Side/latency`` times.
    static let latencySamples = 200

    /// How many operations ``Side/drain`` lets complete out of `count` pending.
    static func drainedOperations(of count: Int) -> Int {
        min(8_000, max(drainChunks, count * 4 / 5))
    }

    /// The chunks ``Side/drain`` times apart: a chunk interrupted by another process is an
    /// outlier the median leaves out.
    static let drainChunks = 4

    /// What a child process measured.
    struct ChildMeasurement {
        var seconds: Double
        var peakMegabytes: Double
        var startMegabytes: Double
    }

    /// Starts this executable again to measure one side, and reads its report.
    static func measureInChild(_ side: Side, directory: URL, count: Int) throws -> ChildMeasurement {
        guard let executable = Bundle.main.executableURL else {
            throw BenchmarkFailure("cannot find the benchmark executable to start a child process")
        }
        let process = Process()
        process.executableURL = executable
        process.arguments = [childCommand, side.rawValue, directory.path, String(count)]
        let output = Pipe()
        process.standardOutput = output
        try process.run()
        let data = output.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        let text = String(decoding: data, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
        let fields = text.split(separator: " ").compactMap { Double($0) }
        guard process.terminationStatus == 0, fields.count == 3 else {
            throw BenchmarkFailure("the \(side.rawValue) child process failed (status \(process.terminationStatus)): \(text)")
        }
        return ChildMeasurement(seconds: fields[0], peakMegabytes: fields[1], startMegabytes: fields[2])
    }

    /// The child process: `--p5-child restore|bare|write DIRECTORY COUNT`. Prints
    /// `SECONDS PEAK_MB START_MB` on standard output and exits; status 1 when the side did
    /// not get `COUNT` records. `write` fills a new store with `COUNT` records, so that a
    /// profiler can be run on `restore` or `bare` by hand.
    static func runChild(_ arguments: [String]) -> Never {
        guard arguments.count == 3, let side = Side(rawValue: arguments[0]), let count = Int(arguments[2]) else {
            print("usage: \(childCommand) restore|bare|write|counts|add|latency|drain DIRECTORY COUNT")
            exit(64)
        }
        let directory = URL(fileURLWithPath: arguments[1])
        let startMegabytes = ResidentMemory.currentMegabytes()
        do {
            // What each side built stays alive until after the clock stops: freeing it is
            // not part of a restore.
            var result: Any?
            let start = Timing.now()
            let found: Int
            switch side {
            case .restore:
                let queue = try StoreFixture.openQueue(directory, suspended: true)
                let report = try queue.restore()
                found = report.restored.count
                result = queue
            case .bare:
                let records = try BareRecordReader.decodeAll(try JournalReader.records(in: directory))
                found = records.count
                result = records
            case .write:
                try StoreFixture.writePendingRecords(count, to: directory, producers: 16)
                found = count
            case .counts:
                found = try ReadOnlyPersistentStore(directory: directory).counts().pending
            case .add:
                let queue = try StoreFixture.openQueue(directory, suspended: true)
                try StoreFixture.addInBatches(count, to: queue)
                found = try queue.counts().pending
                result = queue
            case .latency:
                let queue = try StoreFixture.openQueue(directory, suspended: true)
                found = try queue.restore().restored.count
                var samples: [Double] = []
                for _ in 0..<latencySamples {
                    let operation = StoredBenchmarkOperation(payload: .example)
                    let added = Timing.now()
                    try queue.addOperation(operation)
                    samples.append(Timing.seconds(from: added, to: Timing.now()))
                }
                print("\(samples.median) \(ResidentMemory.peakMegabytes()) \(startMegabytes)")
                exit(found >= count ? 0 : 1)
            case .drain:
                let queue = try StoreFixture.openQueue(directory, suspended: true)
                found = try queue.restore().restored.count
                let chunk = drainedOperations(of: count) / drainChunks
                let completed = Locked(0)
                let chunkDone = DispatchSemaphore(value: 0)
                queue.eventHandler = { event in
                    guard case .succeeded = event else { return }
                    if completed.withLock({ $0 += 1; return $0 }).isMultiple(of: chunk) { chunkDone.signal() }
                }
                var chunkSeconds: [Double] = []
                var chunkStarted = Timing.now()
                queue.isSuspended = false
                for _ in 0..<drainChunks {
                    chunkDone.wait()
                    let now = Timing.now()
                    chunkSeconds.append(Timing.seconds(from: chunkStarted, to: now))
                    chunkStarted = now
                }
                queue.isSuspended = true
                print("\(chunkSeconds.median) \(ResidentMemory.peakMegabytes()) \(startMegabytes)")
                exit(found >= count ? 0 : 1)
            }
            let seconds = Timing.seconds(from: start, to: Timing.now())
            guard found == count else {
                print("expected \(count) records, got \(found)")
                exit(1)
            }
            print("\(seconds) \(ResidentMemory.peakMegabytes()) \(startMegabytes)")
            withExtendedLifetime(result) {}
            exit(0)
        } catch {
            print("\(error)")
            exit(1)
        }
    }
}

/// P5's baseline: the least a restore must do — read each file and decode it with the
/// Foundation decoders, nothing verified.
enum BareRecordReader {
    /// The fields of a record body (see the record format in `PersistentOperations`); the
    /// journal's format 5 leaves out the ones that hold their default (0, no tags).
    struct Envelope: Decodable {
        var formatVersion: Int
        var id: String
        var typeIdentifier: String
        var payload: Data
        var priority: Int?
        var enqueueSequence: UInt64
        var enqueuedAt: Date
        var tags: [String]?
        var numberOfRetries: Int?
        var numberOfAttempts: Int?
        var attemptsInFlight: Int?
        var notBefore: Date?
        var uniqueKey: String?
        var nextAttemptAt: Date?
        var lastErrorDescription: String?
        var failureReason: String?
    }

    /// The keyed box a payload is stored in.
    struct PayloadBox: Decodable {
        var value: TypicalPayload
    }

    static let headerSize = 20

    /// Decodes every record (the versioned record format: a header, then the property list).
    static func decodeAll(_ records: [Data]) throws -> [(Envelope, TypicalPayload)] {
        let decoder = PropertyListDecoder()
        return try records.map { file in
            let envelope = try decoder.decode(Envelope.self, from: file.subdata(in: headerSize..<file.count))
            return (envelope, try decoder.decode(PayloadBox.self, from: envelope.payload).value)
        }
    }

    /// Reads and decodes every `.record` file in `directory`.
    static func readAll(in directory: URL) throws -> [(Envelope, TypicalPayload)] {
        let decoder = PropertyListDecoder()
        var results: [(Envelope, TypicalPayload)] = []
        for name in try FileManager.default.contentsOfDirectory(atPath: directory.path) where name.hasSuffix(".record") {
            let file = try contents(ofFile: directory.path + "/" + name)
            let envelope = try decoder.decode(Envelope.self, from: file.subdata(in: headerSize..<file.count))
            let payload = try decoder.decode(PayloadBox.self, from: envelope.payload).value
            results.append((envelope, payload))
        }
        return results
    }

    /// The whole file at `path`.
    static func contents(ofFile path: String) throws -> Data {
        let descriptor = open(path, O_RDONLY | O_CLOEXEC)
        guard descriptor >= 0 else { throw BenchmarkFailure("cannot open \(path)") }
        defer { close(descriptor) }
        var status = stat()
        guard fstat(descriptor, &status) == 0 else { throw BenchmarkFailure("cannot stat \(path)") }
        var data = Data(count: Int(status.st_size))
        let count = data.withUnsafeMutableBytes { read(descriptor, $0.baseAddress, $0.count) }
        guard count == data.count else { throw BenchmarkFailure("short read of \(path)") }
        return data
    }
}

/// The resident memory of this process.
enum ResidentMemory {
    /// The peak resident set so far, in MB.
    static func peakMegabytes() -> Double {
        #if os(Linux)
        if let kilobytes = statusField("VmHWM") { return kilobytes / 1024 }
        #endif
        var usage = rusage()
        #if canImport(Darwin)
        getrusage(RUSAGE_SELF, &usage)
        return Double(usage.ru_maxrss) / 1_048_576   // bytes on Apple platforms
        #else
        getrusage(RUSAGE_SELF.rawValue, &usage)
        return Double(usage.ru_maxrss) / 1024        // kilobytes elsewhere
        #endif
    }

    /// The resident set now, in MB (`nan` where unknown).
    static func currentMegabytes() -> Double {
        #if os(Linux)
        return statusField("VmRSS").map { $0 / 1024 } ?? .nan
        #else
        return .nan
        #endif
    }

    /// A `kB` field of `/proc/self/status`.
    private static func statusField(_ name: String) -> Double? {
        guard let status = try? String(contentsOfFile: "/proc/self/status", encoding: .utf8) else { return nil }
        for line in status.split(separator: "\n") where line.hasPrefix(name + ":") {
            return Double(line.dropFirst(name.count + 1).trimmingCharacters(in: .whitespaces).split(separator: " ").first ?? "")
        }
        return nil
    }
}
