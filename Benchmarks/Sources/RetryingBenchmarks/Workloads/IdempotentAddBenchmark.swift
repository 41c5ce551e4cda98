import Foundation
import PersistentOperations

/// I1: what an idempotency key costs an add.
///
/// One store with 1,000 pending records of the typical payload, restored by a queue whose
/// `OperationQueue` is suspended. In interleaved rounds, a batch of durable adds is timed one by
/// one with a fresh idempotency key each, and a batch without one; after each batch the added
/// operations are cancelled (untimed), so the backlog stays where it was — and each keyed
/// cancellation leaves its key remembered (a retire frame), so the keyed adds run against a
/// growing set of remembered keys, as a producer's do. The row compares the median add.
///
/// A second row times repeats: an add of a key the queue knows, which stores nothing.
struct IdempotentAddBenchmark: Benchmark {
    let id = "I1"
    let title = "one durable add with an idempotency key vs without"

    static let probeTag = "i1-probe"

    func run(in context: BenchmarkContext) throws -> [BenchmarkResult] {
        let pending = context.size(full: 1_000, smoke: 100)
        let batch = context.size(full: 50, smoke: 10)
        let rounds = context.size(full: 8, smoke: 2)

        let directory = try TemporaryDirectory("i1")
        defer { directory.remove() }
        try StoreFixture.writePendingRecords(pending, to: directory.url)
        let queue = try StoreFixture.openQueue(directory.url, suspended: true)
        defer { queue.close() }
        let waiter = OutcomeWaiter(queue: queue)
        guard try queue.restore().restored.count == pending else { throw BenchmarkFailure("the restore missed records") }

        var keyCounter = 0
        func timeAdds(keyed: Bool) throws -> [Double] {
            var times: [Double] = []
            var ids: [PersistentOperationID] = []
            for _ in 0..<batch {
                var options = EnqueueOptions(tags: [Self.probeTag])
                if keyed {
                    keyCounter += 1
                    options.idempotencyKey = "request-\(keyCounter)"
                }
                let operation = StoredBenchmarkOperation(payload: .example)
                let start = Timing.now()
                let result = try queue.addOperation(operation, options: options)
                times.append(Timing.seconds(from: start, to: Timing.now()))
                guard result.disposition == .added else { throw BenchmarkFailure("a fresh key was taken for a repeat") }
                ids.append(result.id)
            }
            _ = queue.cancelOperations(taggedWith: Self.probeTag)
            for id in ids { try waiter.wait(for: id) }
            return times
        }

        var keyed: [Double] = []
        var plain: [Double] = []
        for round in 0..<rounds {
            if round.isMultiple(of: 2) {
                keyed += try timeAdds(keyed: true)
                plain += try timeAdds(keyed: false)
            } else {
                plain += try timeAdds(keyed: false)
                keyed += try timeAdds(keyed: true)
            }
        }

        // Repeats of keys the queue remembers: nothing is stored.
        var repeats: [Double] = []
        for index in 1...min(keyCounter, 200) {
            let start = Timing.now()
            let result = try queue.addOperation(
                StoredBenchmarkOperation(payload: .example), options: EnqueueOptions(idempotencyKey: "request-\(index)")
            )
            repeats.append(Timing.seconds(from: start, to: Timing.now()))
            guard result.disposition == .keptExisting else { throw BenchmarkFailure("a remembered key was not found") }
        }
        let stored = try StoreFixture.pendingRecordCount(directory.url)
        guard stored == pending else { throw BenchmarkFailure("expected \(pending) pending records, found \(stored)") }

        return [
            BenchmarkResult(
                id: id,
                name: "one durable add with a fresh idempotency key vs without",
                value: keyed.median * 1e3,
                unit: .milliseconds,
                baseline: plain.median * 1e3,
                baselineName: "no key",
                target: .ratio(atMost: 1.1),
                note: "median of \(rounds * batch) adds each (\(rounds) interleaved rounds of \(batch)), \(pending.groupedDigits) pending; "
                    + String(format: "p90 %.3f vs %.3f ms; ", keyed.percentile(90) * 1e3, plain.percentile(90) * 1e3)
                    + "\(keyCounter.groupedDigits) keys remembered by the end"
            ),
            BenchmarkResult(
                id: "\(id).repeat",
                name: "an add of a remembered key (stores nothing) vs a durable add without a key",
                value: repeats.median * 1e3,
                unit: .milliseconds,
                baseline: plain.median * 1e3,
                baselineName: "no key",
                note: "median of \(repeats.count) repeats"
            ),
        ]
    }
}
