import Foundation
import PersistentOperations

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// P3b: durable adds in batches (`addOperations`), run to completion, against raw loops.
///
/// - **Queue:** 1,000 operations added in batches of 100 by one thread with the queue
///   running, then waited for until every one has succeeded (attempt, removal).
/// - **Baseline, raw serial loop:** one durable file creation per operation
///   (write+fsync+rename+fsync(dir)), as P3's baseline.
/// - **Baseline, raw batched loop:** per batch of 100, every file written and fsynced, each
///   renamed into place, one directory sync: the least an all-or-none batch of files costs
///   without a commit record.
///
/// The queue does more than either: a commit marker per batch (written, synced, renamed, its
/// directory synced), and for each operation an attempt marker and the removal of its record.
struct BatchedAddBenchmark: Benchmark {
    let id = "P3b"
    let title = "1,000 durable adds in batches of 100 (addOperations), run to completion, vs raw serial and raw batched loops"

    static let batchSize = 100

    func run(in context: BenchmarkContext) throws -> [BenchmarkResult] {
        let count = context.size(full: 1_000, smoke: 200)
        let rounds = context.size(full: 7, smoke: 1)
        let recordFile = try StoreFixture.typicalRecordFile()
        _ = try Self.queueBatched(count: count / 4)   // warm-up

        var queue: [Double] = []
        var serial: [Double] = []
        var batched: [Double] = []
        for round in 0..<rounds {
            var sides: [() throws -> Void] = [
                { serial.append(try Self.rawSerial(bytes: recordFile, count: count)) },
                { queue.append(try Self.queueBatched(count: count)) },
                { batched.append(try Self.rawBatched(bytes: recordFile, count: count)) },
            ]
            if !round.isMultiple(of: 2) { sides.reverse() }
            for side in sides { try side() }
            context.progress(String(
                format: "round %d: queue %.0f ops/s, raw serial %.0f ops/s, raw batched %.0f ops/s",
                round + 1, queue[round], serial[round], batched[round]
            ))
        }
        let note = "\(count.groupedDigits) operations per round in batches of \(Self.batchSize), median of \(rounds) interleaved rounds; "
            + "ratio = median of the rounds' ratios"
        return [
            BenchmarkResult(
                id: "\(id).serial",
                name: "addOperations in batches of 100, run to completion",
                value: queue.median,
                unit: .operationsPerSecond,
                baseline: serial.median,
                baselineName: "raw write+fsync+rename+fsync(dir), 1 thread",
                ratio: zip(queue, serial).map { $0 / $1 }.median,
                target: .ratio(atLeast: 2),
                note: note
            ),
            BenchmarkResult(
                id: "\(id).batched",
                name: "the same, against a raw batched loop",
                value: queue.median,
                unit: .operationsPerSecond,
                baseline: batched.median,
                baselineName: "raw: 100 files written+fsynced, renamed, one fsync(dir) per batch",
                ratio: zip(queue, batched).map { $0 / $1 }.median,
                target: .ratio(atLeast: 0.8),
                note: note
            ),
        ]
    }

    /// Adds `count` operations in batches and waits for all of them; returns operations per second.
    static func queueBatched(count: Int) throws -> Double {
        let directory = try TemporaryDirectory("p3b-queue")
        defer { directory.remove() }
        let queue = try StoreFixture.openQueue(directory.url, suspended: false)
        defer { queue.close() }
        let seconds = try Timing.seconds {
            for start in stride(from: 0, to: count, by: batchSize) {
                let batch = (start..<min(start + batchSize, count)).map { _ in StoredBenchmarkOperation(payload: .example) }
                try queue.addOperations(batch)
            }
            queue.waitUntilAllOperationsAreFinished()
        }
        try DurableThroughputBenchmark.checkAllSucceeded(queue, directory: directory.url)
        return Double(count) / seconds
    }

    static func rawSerial(bytes: Data, count: Int) throws -> Double {
        try rawLoop("p3b-raw", count: count) { path, range in
            for index in range {
                try RawDurableWrite.writeFile(bytes, to: path, name: "\(index).record")
            }
        }
    }

    static func rawBatched(bytes: Data, count: Int) throws -> Double {
        try rawLoop("p3b-raw-batched", count: count) { path, range in
            try RawDurableWrite.writeBatch(bytes, to: path, names: range.map { "\($0).record" })
        }
    }

    /// Operations per second of `write` called for each batch of `count` files, in a fresh directory.
    private static func rawLoop(_ label: String, count: Int, _ write: (String, Range<Int>) throws -> Void) throws -> Double {
        let directory = try TemporaryDirectory(label)
        defer { directory.remove() }
        let seconds = try Timing.seconds {
            for start in stride(from: 0, to: count, by: batchSize) {
                try write(directory.url.path, start..<min(start + batchSize, count))
            }
        }
        return Double(count) / seconds
    }
}

/// P9: a chain of 1,000 dependent persistent operations against 1,000 independent ones on a
/// serial queue, both added in batches of 100 and run to completion.
///
/// The chain's extra cost is its graph: each record carries its prerequisite, each add
/// resolves it, and each success releases the next operation. Linux's `OperationQueue` takes
/// quadratic time over a chain parked in it (10,000 took 15 s); the persistent queue parks
/// nothing there.
struct DependencyChainBenchmark: Benchmark {
    let id = "P9"
    let title = "a chain of 1,000 dependent persistent operations vs 1,000 independent ones, serial queue"

    func run(in context: BenchmarkContext) throws -> [BenchmarkResult] {
        let count = context.size(full: 1_000, smoke: 200)
        let rounds = context.size(full: 7, smoke: 1)
        _ = try Self.run(count: count / 4, chained: true)   // warm-up
        var chain: [Double] = []
        var independent: [Double] = []
        for round in 0..<rounds {
            var sides: [() throws -> Void] = [
                { independent.append(try Self.run(count: count, chained: false)) },
                { chain.append(try Self.run(count: count, chained: true)) },
            ]
            if !round.isMultiple(of: 2) { sides.reverse() }
            for side in sides { try side() }
            context.progress(String(format: "round %d: chain %.3f s, independent %.3f s", round + 1, chain[round], independent[round]))
        }
        return [
            BenchmarkResult(
                id: id,
                name: "chain of \(count.groupedDigits), added in batches of 100 and run to completion",
                value: chain.median,
                unit: .seconds,
                baseline: independent.median,
                baselineName: "\(count.groupedDigits) independent operations, the same way",
                ratio: zip(chain, independent).map { $0 / $1 }.median,
                target: .ratio(atMost: 1.3),
                note: "serial OperationQueue (maxConcurrentOperationCount 1); median of \(rounds) interleaved rounds; ratio = median of the rounds' ratios"
            ),
        ]
    }

    /// Seconds to add `count` operations (each depending on the one before when `chained`)
    /// in batches of 100 and run them all.
    static func run(count: Int, chained: Bool) throws -> Double {
        let directory = try TemporaryDirectory(chained ? "p9-chain" : "p9-independent")
        defer { directory.remove() }
        let operationQueue = OperationQueue()
        operationQueue.maxConcurrentOperationCount = 1
        let queue = try PersistentOperationQueue(directory: directory.url, operationQueue: operationQueue)
        queue.register(StoredBenchmarkOperation.self)
        defer { queue.close() }
        var operations: [StoredBenchmarkOperation] = []
        operations.reserveCapacity(count)
        for index in 0..<count {
            let operation = StoredBenchmarkOperation(payload: .example)
            if chained, index > 0 { operation.addDependency(operations[index - 1]) }
            operations.append(operation)
        }
        let seconds = try Timing.seconds {
            for start in stride(from: 0, to: count, by: BatchedAddBenchmark.batchSize) {
                try queue.addOperations(Array(operations[start..<min(start + BatchedAddBenchmark.batchSize, count)]))
            }
            queue.waitUntilAllOperationsAreFinished()
        }
        try DurableThroughputBenchmark.checkAllSucceeded(queue, directory: directory.url)
        return seconds
    }
}

extension RawDurableWrite {
    /// Writes one file per name durably as a batch: every file written and fsynced, then each
    /// renamed into place, then one directory sync.
    static func writeBatch(_ bytes: Data, to directory: String, names: [String]) throws {
        for name in names {
            let descriptor = open(directory + "/." + name + ".tmp", O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, 0o600)
            guard descriptor >= 0 else { throw BenchmarkFailure("open failed: \(String(cString: strerror(errno)))") }
            let written = bytes.withUnsafeBytes { write(descriptor, $0.baseAddress, $0.count) }
            guard written == bytes.count, fsync(descriptor) == 0 else {
                close(descriptor)
                throw BenchmarkFailure("write or fsync failed: \(String(cString: strerror(errno)))")
            }
            close(descriptor)
        }
        for name in names {
            guard rename(directory + "/." + name + ".tmp", directory + "/" + name) == 0 else {
                throw BenchmarkFailure("rename failed: \(String(cString: strerror(errno)))")
            }
        }
        try synchronizeDirectory(directory)
    }
}
