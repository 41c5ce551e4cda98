import Foundation
import PersistentOperations

/// P4: whether adding gets slower as records pile up.
///
/// Two stores are filled through the public API with a small and a large number of pending
/// records of the typical payload (100 and 10,000). Each is then opened the way an app
/// opens it at launch — a new queue, the type registered, its `OperationQueue` suspended so
/// the pending records stay pending — and restored. Then, in interleaved rounds, a batch of
/// adds is timed one by one on each store; after each batch the added operations are
/// cancelled (their records removed, untimed), so the number pending stays where it was.
/// The row compares the median add at each size.
///
/// The first add after the restore is reported apart: it is where a queue does one-time
/// work (such as finding the largest enqueue sequence on disk).
struct AddScalingBenchmark: Benchmark {
    let id = "P4"
    let title = "cost of one durable add with few vs many pending records"

    static let probeTag = "p4-probe"

    func run(in context: BenchmarkContext) throws -> [BenchmarkResult] {
        let smallCount = 100
        let largeCount = context.size(full: 10_000, smoke: 1_000)
        let batch = context.size(full: 40, smoke: 20)
        let rounds = context.size(full: 5, smoke: 2)

        let small = try Store(pending: smallCount)
        defer { small.remove() }
        let large = try Store(pending: largeCount)
        defer { large.remove() }
        context.progress(String(format: "first add after restore: %.2f ms with %@ pending, %.2f ms with %@ pending",
                                small.firstAdd * 1e3, smallCount.groupedDigits, large.firstAdd * 1e3, largeCount.groupedDigits))

        var smallAdds: [Sample] = []
        var largeAdds: [Sample] = []
        for round in 0..<rounds {
            if round.isMultiple(of: 2) {
                smallAdds += try small.timeAdds(batch)
                largeAdds += try large.timeAdds(batch)
            } else {
                largeAdds += try large.timeAdds(batch)
                smallAdds += try small.timeAdds(batch)
            }
        }
        let smallTimes = smallAdds.map(\.wall)
        let largeTimes = largeAdds.map(\.wall)
        try small.checkPending(smallCount)
        try large.checkPending(largeCount)

        let smallMedian = smallTimes.median * 1e3
        let largeMedian = largeTimes.median * 1e3
        return [
            BenchmarkResult(
                id: id,
                name: "one add with \(largeCount.groupedDigits) vs \(smallCount.groupedDigits) pending records",
                value: largeMedian,
                unit: .milliseconds,
                baseline: smallMedian,
                baselineName: "\(smallCount.groupedDigits) pending",
                target: .ratio(atMost: 1.2),
                note: "median of \(rounds * batch) adds per size (\(rounds) interleaved rounds of \(batch)); "
                    + String(format: "p90 %.2f vs %.2f ms; ", largeTimes.percentile(90) * 1e3, smallTimes.percentile(90) * 1e3)
                    + String(format: "CPU time of the adding thread, median %.0f vs %.0f µs; ",
                             largeAdds.map(\.cpu).median * 1e6, smallAdds.map(\.cpu).median * 1e6)
                    + "stores restored by a new queue, OperationQueue suspended; the first add after the restore is not included"
            ),
            BenchmarkResult(
                id: "\(id).first",
                name: "first add after restore with \(largeCount.groupedDigits) vs \(smallCount.groupedDigits) pending",
                value: large.firstAdd * 1e3,
                unit: .milliseconds,
                baseline: small.firstAdd * 1e3,
                baselineName: "\(smallCount.groupedDigits) pending",
                note: "one sample each, so noisy"
            ),
        ]
    }

    /// One add: wall-clock seconds, and CPU seconds of the adding thread.
    struct Sample {
        var wall: Double
        var cpu: Double
    }

    /// A store holding a number of pending records, restored by a suspended queue.
    final class Store {
        let directory: TemporaryDirectory
        let queue: PersistentOperationQueue
        let waiter: OutcomeWaiter
        /// Seconds the first add after the restore took.
        private(set) var firstAdd: Double = 0

        init(pending count: Int) throws {
            directory = try TemporaryDirectory("p4-\(count)")
            try StoreFixture.writePendingRecords(count, to: directory.url)
            queue = try StoreFixture.openQueue(directory.url, suspended: true)
            waiter = OutcomeWaiter(queue: queue)
            let report = try queue.restore()
            guard report.restored.count == count else {
                throw BenchmarkFailure("restored \(report.restored.count) of \(count) records")
            }
            firstAdd = try timeAdds(1)[0].wall
        }

        /// Times `count` adds one by one, then cancels them and waits until their records
        /// are gone; returns each add's wall-clock and thread CPU seconds.
        func timeAdds(_ count: Int) throws -> [Sample] {
            var times: [Sample] = []
            var ids: [PersistentOperationID] = []
            let options = EnqueueOptions(tags: [AddScalingBenchmark.probeTag])
            for _ in 0..<count {
                let operation = StoredBenchmarkOperation(payload: .example)
                let cpuStart = Timing.threadCPUSeconds()
                let start = Timing.now()
                let result = try queue.addOperation(operation, options: options)
                let wall = Timing.seconds(from: start, to: Timing.now())
                times.append(Sample(wall: wall, cpu: Timing.threadCPUSeconds() - cpuStart))
                ids.append(result.id)
            }
            _ = queue.cancelOperations(taggedWith: AddScalingBenchmark.probeTag)
            for id in ids {
                try waiter.wait(for: id)
            }
            return times
        }

        /// Throws unless exactly `count` records are pending.
        func checkPending(_ count: Int) throws {
            let files = try StoreFixture.pendingRecordCount(directory.url)
            // The queue reports a cancellation just before it stops tracking the operation.
            let deadline = Timing.now() + 5_000_000_000
            while queue.operations().count > count, Timing.now() < deadline {
                Thread.sleep(forTimeInterval: 0.001)
            }
            let tracked = queue.operations().count
            guard files == count, tracked == count else {
                throw BenchmarkFailure("expected \(count) pending records, found \(files) files and \(tracked) tracked operations")
            }
        }

        func remove() {
            queue.close()
            directory.remove()
        }
    }
}
