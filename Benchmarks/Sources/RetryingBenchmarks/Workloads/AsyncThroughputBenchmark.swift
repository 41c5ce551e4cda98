import Foundation
import RetryingOperation

/// P1: what `RetryingOperation`'s machinery costs on the happy path.
///
/// Runs N asynchronous `RetryingOperation`s whose only attempt does a trivial computation
/// and succeeds, on one `OperationQueue`, against N bare asynchronous `Operation`s doing
/// the same computation. The two sides alternate, round after round (the side that goes
/// first alternates too); each side's figure is its median, and the ratio is the median of
/// the rounds' ratios, which cancels slow drifts in the machine's load. A round's time
/// covers creating the operations, adding them and waiting until all have finished;
/// releasing them is left out.
///
/// P1.progress: the same retrying operations, each attempt reporting its progress (one unit of
/// one, through `reportProgress(completed:of:)`), nobody observing it, against the same
/// operations reporting none.
struct AsyncThroughputBenchmark: Benchmark {
    let id = "P1"
    let title = "async RetryingOperations that succeed first time vs bare async Operations, one OperationQueue"

    func run(in context: BenchmarkContext) throws -> [BenchmarkResult] {
        let count = context.size(full: 100_000, smoke: 10_000)
        let rounds = context.size(full: 9, smoke: 3)

        // Warm-up: first-time allocations, thread creation, lazy initialisation.
        _ = try Self.timeBare(count: count / 10)
        _ = try Self.timeRetrying(count: count / 10)

        var bare: [Sample] = []
        var retrying: [Sample] = []
        var reporting: [Sample] = []
        for round in 0..<rounds {
            if round.isMultiple(of: 2) {
                bare.append(try Self.timeBare(count: count))
                retrying.append(try Self.timeRetrying(count: count))
                reporting.append(try Self.timeRetrying(count: count, reportsProgress: true))
            } else {
                reporting.append(try Self.timeRetrying(count: count, reportsProgress: true))
                retrying.append(try Self.timeRetrying(count: count))
                bare.append(try Self.timeBare(count: count))
            }
            context.progress(String(format: "round %d: bare %.3f s (CPU %.3f s), retrying %.3f s (CPU %.3f s), reporting progress %.3f s",
                                    round + 1, bare[round].wall, bare[round].cpu, retrying[round].wall, retrying[round].cpu, reporting[round].wall))
        }

        let retryingWall = retrying.map(\.wall).median
        let bareWall = bare.map(\.wall).median
        return [
            BenchmarkResult(
                id: id,
                name: "\(count.groupedDigits) async RetryingOperations, succeed first time",
                value: retryingWall,
                unit: .seconds,
                baseline: bareWall,
                baselineName: "bare async Operation",
                ratio: zip(retrying, bare).map { $0.wall / $1.wall }.median,
                target: .ratio(atMost: 1.1),
                note: "wall-clock time, median of \(rounds) interleaved rounds; ratio = median of the rounds' ratios; "
                    + "\(Int(Double(count) / retryingWall).groupedDigits) vs \(Int(Double(count) / bareWall).groupedDigits) operations/s; "
                    + "one OperationQueue with default settings; creating the operations included, releasing them not"
            ),
            BenchmarkResult(
                id: "\(id).cpu",
                name: "the same, process CPU time (all threads)",
                value: retrying.map(\.cpu).median,
                unit: .seconds,
                baseline: bare.map(\.cpu).median,
                baselineName: "bare async Operation",
                ratio: zip(retrying, bare).map { $0.cpu / $1.cpu }.median
            ),
            BenchmarkResult(
                id: "\(id).progress",
                name: "the same, each attempt reporting its progress",
                value: reporting.map(\.wall).median,
                unit: .seconds,
                baseline: retryingWall,
                baselineName: "the same reporting none",
                ratio: zip(reporting, retrying).map { $0.wall / $1.wall }.median,
                target: .ratio(atMost: 1.05),
                note: "each attempt reports 1 of 1 with reportProgress(completed:of:); nobody asks for the operation's Progress"
            ),
        ]
    }

    /// The wall-clock and process CPU seconds of one round.
    struct Sample {
        var wall: Double
        var cpu: Double
    }

    /// Runs `body` and returns its wall-clock and process CPU seconds.
    static func sample(_ body: () -> Void) -> Sample {
        let cpuStart = Timing.processCPUSeconds()
        let wall = Timing.seconds(body)
        return Sample(wall: wall, cpu: Timing.processCPUSeconds() - cpuStart)
    }

    /// Creates, runs and finishes `count` bare operations.
    static func timeBare(count: Int) throws -> Sample {
        var operations: [BareAsyncOperation] = []
        let seconds = sample {
            operations = (0..<count).map { BareAsyncOperation(input: UInt64($0)) }
            let queue = OperationQueue()
            queue.addOperations(operations, waitUntilFinished: false)
            queue.waitUntilAllOperationsAreFinished()
        }
        guard operations.allSatisfy({ $0.isFinished && $0.output == trivialWork(on: $0.input) }) else {
            throw BenchmarkFailure("a bare operation did not finish with its result")
        }
        return seconds
    }

    /// Creates, runs and finishes `count` retrying operations, reporting progress when
    /// `reportsProgress`.
    static func timeRetrying(count: Int, reportsProgress: Bool = false) throws -> Sample {
        var operations: [TrivialRetryingOperation] = []
        let seconds = sample {
            operations = (0..<count).map { TrivialRetryingOperation(input: UInt64($0), reportsProgress: reportsProgress) }
            let queue = OperationQueue()
            queue.addOperations(operations, waitUntilFinished: false)
            queue.waitUntilAllOperationsAreFinished()
        }
        guard operations.allSatisfy({ $0.outcome?.isSuccess == true && $0.output == trivialWork(on: $0.input) }) else {
            throw BenchmarkFailure("a RetryingOperation did not succeed with its result")
        }
        guard !reportsProgress || operations.allSatisfy({ $0.progress.fractionCompleted == 1 }) else {
            throw BenchmarkFailure("a RetryingOperation did not complete its progress")
        }
        return seconds
    }
}

/// The work each operation does: small enough that the operation machinery dominates,
/// real enough to be checked afterwards.
@inline(never)
func trivialWork(on input: UInt64) -> UInt64 {
    input &* 0x9E37_79B9_7F4A_7C15 &+ 1
}

/// The attempt of P1: compute, succeed.
final class TrivialRetryingOperation: RetryingOperation, @unchecked Sendable {
    // @unchecked: `output` is written by the single attempt and read only after the queue
    // reported the operation finished.
    let input: UInt64
    let reportsProgress: Bool
    private(set) var output: UInt64 = 0

    init(input: UInt64, reportsProgress: Bool = false) {
        self.input = input
        self.reportsProgress = reportsProgress
        super.init()
    }

    override var isAsynchronous: Bool { true }

    override func startBaseOperation(isRetry: Bool) {
        output = trivialWork(on: input)
        if reportsProgress { reportProgress(completed: 1, of: 1) }
        baseOperationEnded()
    }
}

/// The baseline of P1: the textbook asynchronous `Operation` — its own state behind a lock,
/// `isExecuting` / `isFinished` changes announced with KVO (Linux's `OperationQueue` learns
/// of them only that way) — doing the same work.
final class BareAsyncOperation: Operation, @unchecked Sendable {
    // @unchecked: `executing` and `finished` are only touched while `lock` is held; `output`
    // is written by `start()` and read only after the queue reported the operation finished.
    let input: UInt64
    private(set) var output: UInt64 = 0
    private let lock = NSLock()
    private var executing = false
    private var finished = false

    init(input: UInt64) {
        self.input = input
        super.init()
    }

    override var isAsynchronous: Bool { true }

    override var isExecuting: Bool {
        lock.lock()
        defer { lock.unlock() }
        return executing
    }

    override var isFinished: Bool {
        lock.lock()
        defer { lock.unlock() }
        return finished
    }

    override func start() {
        guard !isCancelled else {
            willChangeValue(forKey: "isFinished")
            lock.lock()
            finished = true
            lock.unlock()
            didChangeValue(forKey: "isFinished")
            return
        }
        willChangeValue(forKey: "isExecuting")
        lock.lock()
        executing = true
        lock.unlock()
        didChangeValue(forKey: "isExecuting")

        output = trivialWork(on: input)

        willChangeValue(forKey: "isExecuting")
        willChangeValue(forKey: "isFinished")
        lock.lock()
        executing = false
        finished = true
        lock.unlock()
        didChangeValue(forKey: "isFinished")
        didChangeValue(forKey: "isExecuting")
    }
}
