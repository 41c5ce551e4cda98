import Foundation
import PersistentOperations

/// F1: bursts of four customers on one queue, first in first out vs fair sharing.
///
/// Four customers each send a burst of `count` jobs (one `addOperations`, tagged
/// `"customer:N"`), 50 ms apart, to a running 8-slot queue; each job's attempt takes 5 ms on a
/// thread of its own. A job's latency runs from its burst's add to the end of its attempt.
/// Reported: the spread of the customers' median latencies (the largest p50 over the
/// smallest), with `Configuration.fairShareTagPrefix = "customer:"` against the default
/// first-in-first-out order, median of interleaved rounds.
struct FairShareBenchmark: Benchmark {
    let id = "F1"
    let title = "bursts of four customers: the spread of their p50 latencies, fair sharing vs first in, first out"

    func run(in context: BenchmarkContext) throws -> [BenchmarkResult] {
        let count = context.size(full: 1_000, smoke: 150)
        let rounds = context.size(full: 3, smoke: 1)
        var fair: [[Double]] = []
        var fifo: [[Double]] = []
        for round in 0..<rounds {
            var sides: [(Bool) throws -> Void] = [
                { _ in fifo.append(try Self.medians(count: count, fair: false)) },
                { _ in fair.append(try Self.medians(count: count, fair: true)) },
            ]
            if !round.isMultiple(of: 2) { sides.reverse() }
            for side in sides { try side(true) }
            context.progress("round \(round + 1): p50 by customer, FIFO " + fifo[round].map { String(format: "%.2f s", $0) }.joined(separator: ", ")
                + "; fair " + fair[round].map { String(format: "%.2f s", $0) }.joined(separator: ", "))
        }
        func spread(_ medians: [Double]) -> Double { (medians.max() ?? 0) / max(medians.min() ?? 1, 1e-9) }
        let fairSpread = fair.map(spread).median
        let fifoSpread = fifo.map(spread).median
        let describe = { (medians: [[Double]]) in
            (0..<4).map { customer in String(format: "%.2f", medians.map { $0[customer] }.median) }.joined(separator: " / ") + " s"
        }
        return [
            BenchmarkResult(
                id: "\(id).fair",
                name: "largest over smallest p50 of 4 customers' bursts, fair sharing",
                value: fairSpread,
                unit: .times,
                baseline: fifoSpread,
                baselineName: "first in, first out (the default)",
                ratio: fairSpread / fifoSpread,
                target: .value(atMost: 2),
                note: "\(count.groupedDigits) jobs per customer, bursts 50 ms apart, 5 ms attempts, 8 slots; p50 by customer in arrival order: fair \(describe(fair)), FIFO \(describe(fifo)); median of \(rounds) interleaved rounds"
            ),
        ]
    }

    /// Runs the four bursts and returns each customer's median latency, in arrival order.
    static func medians(count: Int, fair: Bool) throws -> [Double] {
        let directory = try TemporaryDirectory("f1-fair-share")
        defer { directory.remove() }
        let operationQueue = OperationQueue()
        operationQueue.maxConcurrentOperationCount = 8
        var configuration = PersistentOperationQueue.Configuration()
        configuration.fairShareTagPrefix = fair ? "customer:" : nil
        let queue = try PersistentOperationQueue(directory: directory.url, operationQueue: operationQueue, configuration: configuration)
        defer { queue.close() }
        queue.register(CustomerJob.self)
        let ledger = CustomerLedger()
        var jobs: [CustomerJob] = []
        for customer in 0..<4 {
            if customer > 0 { Thread.sleep(forTimeInterval: 0.05) }
            let burst = (0..<count).map { _ in CustomerJob(payload: .init(customer: customer)) }
            for job in burst { job.ledger = ledger }
            jobs += burst
            ledger.added(customer: customer, at: Timing.now())
            try queue.addOperations(burst, options: EnqueueOptions(tags: ["customer:\(customer)"]))
        }
        queue.waitUntilAllOperationsAreFinished()
        guard jobs.allSatisfy({ $0.outcome?.isSuccess == true }) else { throw BenchmarkFailure("F1: a job did not succeed") }
        return try (0..<4).map { customer in
            let latencies = ledger.latencies(of: customer)
            guard latencies.count == count else { throw BenchmarkFailure("F1: customer \(customer) finished \(latencies.count) of \(count)") }
            return latencies.median
        }
    }
}

/// When each customer's burst was added, and when each of its jobs ended.
final class CustomerLedger: @unchecked Sendable {
    // @unchecked: only touched under `lock`.
    private let lock = NSLock()
    private var addedAt: [Int: UInt64] = [:]
    private var endedAt: [Int: [UInt64]] = [:]

    func added(customer: Int, at time: UInt64) {
        lock.withLock { addedAt[customer] = time }
    }

    func ended(customer: Int, at time: UInt64) {
        lock.withLock { endedAt[customer, default: []].append(time) }
    }

    func latencies(of customer: Int) -> [Double] {
        lock.withLock {
            let start = addedAt[customer] ?? 0
            return (endedAt[customer] ?? []).map { Timing.seconds(from: start, to: $0) }
        }
    }
}

/// A job of one customer: 5 ms on a thread of its own, then success.
final class CustomerJob: RetryingOperation, PersistentOperation, @unchecked Sendable {
    // @unchecked: `ledger` is set before the job is added and only read afterwards.
    struct Payload: Codable, Sendable { var customer: Int }
    static let persistenceIdentifier = "benchmarks.customer-job"
    let payload: Payload
    var ledger: CustomerLedger?

    init(payload: Payload) {
        self.payload = payload
        super.init()
    }

    override var isAsynchronous: Bool { true }

    override func startBaseOperation(isRetry: Bool) {
        Thread.detachNewThread { [self] in
            Thread.sleep(forTimeInterval: 0.005)
            ledger?.ended(customer: payload.customer, at: Timing.now())
            baseOperationEnded()
        }
    }
}
