import Foundation
import PersistentOperations

/// L1–L2: ordered lanes (`EnqueueOptions.lane`).
///
/// - **L1** 10,000 operations in one lane, on a queue of four slots, against 10,000 operations
///   of no lane on a serial queue (one slot): what a lane costs over the ordering a serial
///   queue gives. Both are added to a suspended queue in batches of 1,000, then the queue is
///   resumed and timed until every operation has succeeded.
/// - **L2** one durable add into a lane that holds 10,000 waiting operations, against one into
///   a lane of 100: whether an add into a lane gets slower as the lane grows. Both lanes are
///   filled in batches on a suspended queue; then, in interleaved rounds, adds are timed one
///   by one and cancelled afterwards (untimed), so the lanes keep their length.
struct LaneBenchmark: Benchmark {
    let id = "L"
    let title = "ordered lanes: a long lane vs a serial queue, and an add into a long lane"

    static let probeTag = "l2-probe"

    func run(in context: BenchmarkContext) throws -> [BenchmarkResult] {
        let count = context.size(full: 10_000, smoke: 1_000)
        let rounds = context.size(full: 3, smoke: 1)
        var lane: [Double] = []
        var serial: [Double] = []
        for round in 0..<rounds {
            var sides: [() throws -> Void] = [
                { lane.append(try Self.drain(count, lane: "chat:1", slots: 4)) },
                { serial.append(try Self.drain(count, lane: nil, slots: 1)) },
            ]
            if !round.isMultiple(of: 2) { sides.reverse() }
            for side in sides { try side() }
            context.progress(String(format: "round %d: one lane %.2f s, serial queue %.2f s", round + 1, lane[round], serial[round]))
        }

        let smallCount = 100
        let largeCount = context.size(full: 10_000, smoke: 1_000)
        let batch = context.size(full: 40, smoke: 20)
        let addRounds = context.size(full: 5, smoke: 2)
        let small = try LaneStore(waiting: smallCount)
        defer { small.remove() }
        let large = try LaneStore(waiting: largeCount)
        defer { large.remove() }
        var smallAdds: [Double] = []
        var largeAdds: [Double] = []
        for round in 0..<addRounds {
            if round.isMultiple(of: 2) {
                smallAdds += try small.timeAdds(batch)
                largeAdds += try large.timeAdds(batch)
            } else {
                largeAdds += try large.timeAdds(batch)
                smallAdds += try small.timeAdds(batch)
            }
        }
        try small.checkWaiting(smallCount)
        try large.checkWaiting(largeCount)

        return [
            BenchmarkResult(
                id: "L1",
                name: "\(count.groupedDigits) operations in one lane (4 slots) vs as many on a serial queue",
                value: lane.median,
                unit: .seconds,
                baseline: serial.median,
                baselineName: "no lane, maxConcurrentOperationCount 1",
                ratio: zip(lane, serial).map { $0 / $1 }.median,
                target: .ratio(atMost: 1.3),
                note: "added in batches of 1,000 to a suspended queue, timed from resume until all succeeded; median of \(rounds) interleaved rounds"
            ),
            BenchmarkResult(
                id: "L2",
                name: "one add into a lane of \(largeCount.groupedDigits) vs \(smallCount.groupedDigits) waiting",
                value: largeAdds.median * 1e3,
                unit: .milliseconds,
                baseline: smallAdds.median * 1e3,
                baselineName: "a lane of \(smallCount.groupedDigits)",
                target: .ratio(atMost: 1.2),
                note: "median of \(addRounds * batch) durable adds per size (\(addRounds) interleaved rounds of \(batch)); "
                    + String(format: "p90 %.2f vs %.2f ms", largeAdds.percentile(90) * 1e3, smallAdds.percentile(90) * 1e3)
            ),
        ]
    }

    /// Seconds to run `count` operations added (in `lane`, or in none) to a suspended queue of
    /// `slots` slots, from resuming it until every one has succeeded.
    static func drain(_ count: Int, lane: String?, slots: Int) throws -> Double {
        let directory = try TemporaryDirectory("l1")
        defer { directory.remove() }
        let queue = try StoreFixture.openQueue(directory.url, suspended: true)
        defer { queue.close() }
        queue.operationQueue.maxConcurrentOperationCount = slots
        let options = EnqueueOptions(lane: lane)
        for start in stride(from: 0, to: count, by: 1_000) {
            try queue.addOperations((start..<min(start + 1_000, count)).map { _ in StoredBenchmarkOperation(payload: .example) }, options: options)
        }
        let seconds = Timing.seconds {
            queue.operationQueue.isSuspended = false
            queue.waitUntilAllOperationsAreFinished()
        }
        try DurableThroughputBenchmark.checkAllSucceeded(queue, directory: directory.url)
        return seconds
    }

    /// A suspended queue with one lane of waiting operations.
    final class LaneStore {
        static let lane = "chat:1"
        let directory: TemporaryDirectory
        let queue: PersistentOperationQueue
        let waiter: OutcomeWaiter

        init(waiting count: Int) throws {
            directory = try TemporaryDirectory("l2-\(count)")
            queue = try StoreFixture.openQueue(directory.url, suspended: true)
            waiter = OutcomeWaiter(queue: queue)
            for start in stride(from: 0, to: count, by: 1_000) {
                let batch = (start..<min(start + 1_000, count)).map { _ in StoredBenchmarkOperation(payload: .example) }
                try queue.addOperations(batch, options: EnqueueOptions(lane: Self.lane))
            }
        }

        /// Times `count` adds into the lane one by one, then cancels them and waits until
        /// their records are gone.
        func timeAdds(_ count: Int) throws -> [Double] {
            var times: [Double] = []
            var ids: [PersistentOperationID] = []
            let options = EnqueueOptions(tags: [LaneBenchmark.probeTag], lane: Self.lane)
            for _ in 0..<count {
                let operation = StoredBenchmarkOperation(payload: .example)
                let start = Timing.now()
                let result = try queue.addOperation(operation, options: options)
                times.append(Timing.seconds(from: start, to: Timing.now()))
                ids.append(result.id)
            }
            _ = queue.cancelOperations(taggedWith: LaneBenchmark.probeTag)
            for id in ids {
                try waiter.wait(for: id)
            }
            return times
        }

        /// Throws unless the lane holds exactly `count` operations.
        func checkWaiting(_ count: Int) throws {
            let deadline = Timing.now() + 5_000_000_000
            while queue.operations().count > count, Timing.now() < deadline {
                Thread.sleep(forTimeInterval: 0.001)
            }
            let inLane = queue.operations().filter { $0.lane == Self.lane }.count
            guard inLane == count else { throw BenchmarkFailure("expected \(count) operations in the lane, found \(inLane)") }
        }

        func remove() {
            queue.close()
            directory.remove()
        }
    }
}
