import Foundation
import PersistentOperations

/// P3: throughput of the durable store's whole happy path — add, a successful attempt,
/// removal — against the least a durable store must do.
///
/// One operation is the public lifecycle of a stored operation: `addOperation` (returns
/// once the record is durable), the attempt (a `RetryingOperation` that succeeds at once),
/// and the durable removal of its record; the operation counts once the queue reports it
/// succeeded, which it does after the removal.
///
/// - **Serial:** one producer thread adds an operation and waits until it has finished
///   (`waitUntilAllOperationsAreFinished`), then adds the next: the latency of the
///   lifecycle, as ops/s.
/// - **8 producers:** eight threads do the same at once, each waiting for its own
///   operation to finish (its completion block) before adding its next; concurrent adds
///   share a flush (group commit), and removals ride along with the next one. (Not through
///   the queue's events: under a steady stream, their delivery coalesces up to a millisecond
///   of them into one hop, and a producer that waits for its own event waits for that too —
///   measured, 5,900 lifecycles a second against 14,000.)
/// - **Baseline, raw serial loop:** one thread writes the bytes of a real record file (taken
///   from a store) to a new file, `fsync`s it, renames it into place and `fsync`s the
///   directory — one durable file creation per operation, nothing else.
///
/// The queue side appends to its journal: the add's frame is flushed before `addOperation`
/// returns; each attempt writes an attempt frame and each removal a removal frame, written
/// but not flushed (the next flush, or the writer's flush delay, makes them durable). A raw
/// loop on eight threads is reported too, to show how far this disk scales with concurrency
/// at all.
///
/// All sides run in interleaved rounds; each figure is the median of its rounds and each
/// ratio the median of the rounds' ratios.
struct DurableThroughputBenchmark: Benchmark {
    let id = "P3"
    let title = "durable add → success → removal, serial and 8 producers, vs a raw write+fsync+rename+fsync(dir) loop"

    static let producers = 8

    func run(in context: BenchmarkContext) throws -> [BenchmarkResult] {
        // Many short rounds rather than a few long ones: the disk is shared, and the sides
        // of one round run close together in time.
        let serialCount = context.size(full: 150, smoke: 50)
        let concurrentCount = context.size(full: 600, smoke: 200)
        let rounds = context.size(full: 11, smoke: 2)
        let recordFile = try StoreFixture.typicalRecordFile()

        // Warm-up: thread creation, first file-system use, lazy initialisation.
        _ = try Self.queueSerial(count: serialCount / 4)
        _ = try Self.rawLoop(bytes: recordFile, count: serialCount / 4, threads: 1)

        var serial: [Sample] = []
        var concurrent: [Sample] = []
        var raw: [Sample] = []
        var rawConcurrent: [Sample] = []
        for round in 0..<rounds {
            var sides: [() throws -> Void] = [
                { raw.append(try Self.rawLoop(bytes: recordFile, count: serialCount, threads: 1)) },
                { serial.append(try Self.queueSerial(count: serialCount)) },
                { concurrent.append(try Self.queueConcurrent(count: concurrentCount, producers: Self.producers)) },
                { rawConcurrent.append(try Self.rawLoop(bytes: recordFile, count: concurrentCount, threads: Self.producers)) },
            ]
            if !round.isMultiple(of: 2) { sides.reverse() }
            for side in sides { try side() }
            context.progress(String(
                format: "round %d: raw %.0f ops/s, queue serial %.0f ops/s, queue 8 producers %.0f ops/s, raw 8 threads %.0f ops/s",
                round + 1, raw[round].operationsPerSecond, serial[round].operationsPerSecond,
                concurrent[round].operationsPerSecond, rawConcurrent[round].operationsPerSecond
            ))
        }

        let rawName = "raw write+fsync+rename+fsync(dir), 1 thread"
        func cpu(_ samples: [Sample]) -> String {
            String(format: "%.0f µs", samples.map(\.cpuSecondsPerOperation).median * 1e6)
        }
        return [
            BenchmarkResult(
                id: "\(id).serial",
                name: "durable add → success → removal, 1 producer waiting for each",
                value: serial.map(\.operationsPerSecond).median,
                unit: .operationsPerSecond,
                baseline: raw.map(\.operationsPerSecond).median,
                baselineName: rawName,
                ratio: zip(serial, raw).map { $0.operationsPerSecond / $1.operationsPerSecond }.median,
                target: .ratio(atLeast: 0.8),
                note: "\(serialCount.groupedDigits) operations per round, median of \(rounds) interleaved rounds; "
                    + "ratio = median of the rounds' ratios; "
                    + String(format: "%.0f%% of the time in addOperation (the durable add), the rest running, removing and waking the producer; ",
                             serial.map(\.addShare).median * 100)
                    + "process CPU per operation \(cpu(serial)) vs \(cpu(raw)) raw; "
                    + "record file \(recordFile.count) B (typical payload, as the queue stores it)"
            ),
            BenchmarkResult(
                id: "\(id).8producers",
                name: "the same, 8 producer threads each waiting for its own",
                value: concurrent.map(\.operationsPerSecond).median,
                unit: .operationsPerSecond,
                baseline: raw.map(\.operationsPerSecond).median,
                baselineName: rawName,
                ratio: zip(concurrent, raw).map { $0.operationsPerSecond / $1.operationsPerSecond }.median,
                target: .ratio(atLeast: 4),
                note: "\(concurrentCount.groupedDigits) operations per round; each producer waits for its operation's succeeded event; "
                    + "process CPU per operation \(cpu(concurrent))"
            ),
            BenchmarkResult(
                id: "\(id).raw8",
                name: "raw loop on 8 threads (what the disk allows)",
                value: rawConcurrent.map(\.operationsPerSecond).median,
                unit: .operationsPerSecond,
                baseline: raw.map(\.operationsPerSecond).median,
                baselineName: rawName,
                ratio: zip(rawConcurrent, raw).map { $0.operationsPerSecond / $1.operationsPerSecond }.median,
                note: "\(concurrentCount.groupedDigits) files per round; process CPU per file \(cpu(rawConcurrent))"
            ),
        ]
    }

    /// One side of one round.
    struct Sample {
        var operationsPerSecond: Double
        var cpuSecondsPerOperation: Double
        /// The share of the time spent in `addOperation` (serial queue side only).
        var addShare: Double = .nan
    }

    /// Runs `body`, which does `count` operations, and returns their rate and CPU cost.
    static func sample(count: Int, _ body: () throws -> Void) rethrows -> Sample {
        let cpuStart = Timing.processCPUSeconds()
        let seconds = try Timing.seconds(body)
        let cpu = Timing.processCPUSeconds() - cpuStart
        return Sample(operationsPerSecond: Double(count) / seconds, cpuSecondsPerOperation: cpu / Double(count))
    }

    /// One producer adds `count` operations, each after the previous one finished.
    static func queueSerial(count: Int, durability: PersistentOperationQueue.Durability = .flushed) throws -> Sample {
        let directory = try TemporaryDirectory("p3-serial")
        defer { directory.remove() }
        let queue = try StoreFixture.openQueue(directory.url, suspended: false, durability: durability)
        defer { queue.close() }
        var addSeconds = 0.0
        let roundStart = Timing.now()
        var result = try sample(count: count) {
            for _ in 0..<count {
                let start = Timing.now()
                try queue.addOperation(StoredBenchmarkOperation(payload: .example))
                addSeconds += Timing.seconds(from: start, to: Timing.now())
                queue.waitUntilAllOperationsAreFinished()
            }
        }
        result.addShare = addSeconds / Timing.seconds(from: roundStart, to: Timing.now())
        try checkAllSucceeded(queue, directory: directory.url)
        return result
    }

    /// `producers` threads add `count` operations in all, each waiting for its previous
    /// operation to finish before adding the next.
    static func queueConcurrent(count: Int, producers: Int) throws -> Sample {
        let directory = try TemporaryDirectory("p3-concurrent")
        defer { directory.remove() }
        let queue = try StoreFixture.openQueue(directory.url, suspended: false)
        defer { queue.close() }
        let result = try sample(count: count) {
            try onThreads(producers) { producer in
                let finished = DispatchSemaphore(value: 0)
                for _ in 0..<share(of: count, for: producer, among: producers) {
                    let operation = StoredBenchmarkOperation(payload: .example)
                    operation.completionBlock = { finished.signal() }
                    try queue.addOperation(operation, options: EnqueueOptions())
                    guard finished.wait(timeout: .now() + 60) == .success else {
                        throw BenchmarkFailure("an operation did not finish within 60 s")
                    }
                }
            }
        }
        queue.waitUntilAllOperationsAreFinished()
        try checkAllSucceeded(queue, directory: directory.url)
        return result
    }

    /// Durable file creations of `bytes` on `threads` threads, `count` in all.
    static func rawLoop(bytes: Data, count: Int, threads: Int) throws -> Sample {
        let directory = try TemporaryDirectory("p3-raw")
        defer { directory.remove() }
        let path = directory.url.path
        return try sample(count: count) {
            try onThreads(threads) { thread in
                for index in 0..<share(of: count, for: thread, among: threads) {
                    try RawDurableWrite.writeFile(bytes, to: path, name: "\(thread)-\(index).record")
                }
            }
        }
    }

    /// Throws unless every operation succeeded and left no record behind.
    static func checkAllSucceeded(_ queue: PersistentOperationQueue, directory: URL) throws {
        let counts = try queue.counts()
        let left = try StoreFixture.pendingRecordCount(directory)
        guard counts.failed == 0, counts.quarantined == 0, left == 0 else {
            throw BenchmarkFailure("after the round: \(counts.failed) failed, \(counts.quarantined) quarantined, \(left) pending records left")
        }
    }
}
