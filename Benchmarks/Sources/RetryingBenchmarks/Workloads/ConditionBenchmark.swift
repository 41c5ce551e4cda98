import Foundation
import PersistentOperations

/// P10: stored operations waiting on a run condition that does not hold.
///
/// - **Waiting:** 10,000 operations, stored in batches of 1,000 with the condition "gate" (a
///   `ManualRunCondition` that does not hold), on a running 4-slot queue. Once every one waits
///   for it, the process's CPU time (all threads) is read across a 10 s window: waiting must
///   cost nothing (no polling), as P6 for retry timers.
/// - **Release:** then the condition turns true; the time until every one of the 10,000 first
///   attempts has started, against the baseline: the same 10,000 stored operations without a
///   condition, on a suspended queue, released at once by resuming it — the queue's own fastest
///   way of starting stored work that is all due. Both sides exclude storing.
struct ConditionBenchmark: Benchmark {
    let id = "P10"
    let title = "10,000 stored operations waiting on an unmet run condition: CPU while waiting, and the release"

    func run(in context: BenchmarkContext) throws -> [BenchmarkResult] {
        let count = context.size(full: 10_000, smoke: 1_000)
        let window = context.size(full: 10.0, smoke: 0.5)
        let rounds = context.size(full: 3, smoke: 1)

        var waitingCPU: [Double] = []
        var released: [Double] = []
        var resumed: [Double] = []
        for round in 0..<rounds {
            var sides: [() throws -> Void] = [
                {
                    let (cpu, seconds) = try Self.waitThenRelease(count: count, window: round == 0 ? window : nil)
                    if let cpu { waitingCPU.append(cpu) }
                    released.append(seconds)
                },
                { resumed.append(try Self.resumeSuspended(count: count)) },
            ]
            if !round.isMultiple(of: 2) { sides.reverse() }
            for side in sides { try side() }
            context.progress(String(format: "round %d: condition released in %.3f s, suspended queue resumed in %.3f s", round + 1, released[round], resumed[round]))
        }
        let note = "\(count.groupedDigits) operations, 4-slot queue, median of \(rounds) interleaved rounds; ratio = median of the rounds' ratios"
        return [
            BenchmarkResult(
                id: "\(id).cpu",
                name: "CPU time, \(count.groupedDigits) stored operations waiting on an unmet condition for \(BenchmarkUnit.formatNumber(window)) s",
                value: waitingCPU[0],
                unit: .seconds,
                target: .value(atMost: window >= 10 ? 0.05 : 0.05 * window / 10),
                note: "process CPU (all threads) over the window; the smoke run scales the target with the window"
            ),
            BenchmarkResult(
                id: "\(id).release",
                name: "condition turns true → \(count.groupedDigits) first attempts started",
                value: released.median,
                unit: .seconds,
                baseline: resumed.median,
                baselineName: "the same operations without a condition, released by resuming the suspended queue",
                ratio: zip(released, resumed).map { $0 / $1 }.median,
                target: .ratio(atMost: 1.5),
                note: note
            ),
        ]
    }

    /// Stores `count` operations waiting on an unmet condition; with a `window`, measures the
    /// CPU time across it; then turns the condition true and returns the seconds until every
    /// attempt has started.
    static func waitThenRelease(count: Int, window: TimeInterval?) throws -> (cpu: Double?, seconds: Double) {
        let directory = try TemporaryDirectory("p10-condition")
        defer { directory.remove() }
        let starts = StartCounter()
        let queue = try openQueue(directory.url, suspended: false, starts: starts)
        defer { queue.close() }
        let gate = ManualRunCondition(isSatisfied: false)
        queue.register(gate, as: "gate")
        try add(count, to: queue, options: EnqueueOptions(conditions: ["gate"]))
        let deadline = Timing.now() + 60 * 1_000_000_000
        while try queue.counts().waitingForConditions < count {
            guard Timing.now() < deadline else { throw BenchmarkFailure("the operations did not all wait for the condition within 60 s") }
            Thread.sleep(forTimeInterval: 0.01)
        }
        var cpu: Double?
        if let window {
            let before = Timing.processCPUSeconds()
            Thread.sleep(forTimeInterval: window)
            cpu = Timing.processCPUSeconds() - before
            guard starts.value == 0 else { throw BenchmarkFailure("an operation started while its condition did not hold") }
        }
        let start = Timing.now()
        gate.isSatisfied = true
        try starts.wait(for: count)
        let seconds = Timing.seconds(from: start, to: Timing.now())
        queue.waitUntilAllOperationsAreFinished()
        return (cpu, seconds)
    }

    /// Stores `count` operations on a suspended queue, resumes it, and returns the seconds
    /// until every attempt has started.
    static func resumeSuspended(count: Int) throws -> Double {
        let directory = try TemporaryDirectory("p10-resume")
        defer { directory.remove() }
        let starts = StartCounter()
        let queue = try openQueue(directory.url, suspended: true, starts: starts)
        defer { queue.close() }
        try add(count, to: queue, options: EnqueueOptions())
        let start = Timing.now()
        queue.isSuspended = false
        try starts.wait(for: count)
        let seconds = Timing.seconds(from: start, to: Timing.now())
        queue.waitUntilAllOperationsAreFinished()
        return seconds
    }

    private static func openQueue(_ directory: URL, suspended: Bool, starts: StartCounter) throws -> PersistentOperationQueue {
        let operationQueue = OperationQueue()
        operationQueue.maxConcurrentOperationCount = 4
        operationQueue.isSuspended = suspended
        let queue = try PersistentOperationQueue(directory: directory, operationQueue: operationQueue)
        queue.register(StoredBenchmarkOperation.self)
        queue.eventHandler = { event in
            if case .started = event { starts.increment() }
        }
        return queue
    }

    private static func add(_ count: Int, to queue: PersistentOperationQueue, options: EnqueueOptions) throws {
        for start in stride(from: 0, to: count, by: 1_000) {
            let batch = (start..<min(start + 1_000, count)).map { _ in StoredBenchmarkOperation(payload: .example) }
            try queue.addOperations(batch, options: options)
        }
    }
}

/// Counts attempts started (through the queue's `started` events) and lets a thread wait for a
/// number of them.
final class StartCounter: @unchecked Sendable {
    // @unchecked: `count` is only touched while `condition` is locked.
    private let condition = NSCondition()
    private var count = 0

    func increment() {
        condition.lock()
        count += 1
        condition.broadcast()
        condition.unlock()
    }

    var value: Int {
        condition.lock()
        defer { condition.unlock() }
        return count
    }

    /// Waits until `target` attempts have started (at most 120 s).
    func wait(for target: Int) throws {
        let deadline = Date().addingTimeInterval(120)
        condition.lock()
        defer { condition.unlock() }
        while count < target {
            guard condition.wait(until: deadline) else {
                throw BenchmarkFailure("only \(count) of \(target) attempts started within 120 s")
            }
        }
    }
}
