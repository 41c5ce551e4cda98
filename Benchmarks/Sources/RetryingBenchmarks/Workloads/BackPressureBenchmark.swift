import Foundation
import PersistentOperations

/// B1: a rate-limited downstream, and three ways of answering its "429, Retry-After".
///
/// The downstream accepts at most `limit` requests per 0.25 s window (fixed windows, wall
/// clock); a request beyond gets 429 with Retry-After = the time left until the next window —
/// what a server that says "Retry-After: 1" to everyone does, scaled down. Each request takes
/// 2 ms. `count` stored operations, one request each, run on an 8-slot queue; each 429 is
/// answered in one of three ways:
///
/// - **per operation:** the operation that heard it retries after Retry-After (uncounted);
///   the others go on calling.
/// - **breaker** (the baseline, what a user built by hand): a `ManualRunCondition` that every
///   operation names turns false on a 429 and true again after Retry-After; the operation
///   retries at once, uncounted, and waits for the condition.
/// - **pause:** `queue.pause(for: retryAfter, taggedWith: "api")`; the operation retries at
///   once, uncounted, and the pause holds it with every other operation of the tag.
/// - **start-rate limit:** `Configuration.startRateLimits` keeps the tag's starts at 95% of
///   the downstream's rate (burst: a window's worth), and a 429 still pauses the tag.
///
/// Reported: 429s per success and successes per second, of the pause and of the start-rate
/// limit against the breaker (median of interleaved rounds), with the per-operation figures in
/// the note.
struct BackPressureBenchmark: Benchmark {
    let id = "B1"
    let title = "a rate-limited downstream: 429s per success and throughput, pause vs a hand-made breaker vs per-operation retries"

    enum Strategy: String, CaseIterable, Sendable {
        case perOperation = "per operation"
        case breaker
        case pause
        case rateLimit = "start-rate limit"
    }

    struct Outcome {
        var seconds: Double
        var successes: Int
        var rejections: Int
        var rejectionsPerSuccess: Double { Double(rejections) / Double(max(successes, 1)) }
        var throughput: Double { Double(successes) / seconds }
    }

    func run(in context: BenchmarkContext) throws -> [BenchmarkResult] {
        let count = context.size(full: 2_000, smoke: 300)
        let rounds = context.size(full: 3, smoke: 1)
        let limit = 50   // per 0.25 s window: 200 requests a second
        var outcomes: [Strategy: [Outcome]] = [:]
        for round in 0..<rounds {
            var order = Strategy.allCases
            if !round.isMultiple(of: 2) { order.reverse() }
            for strategy in order {
                let outcome = try Self.run(strategy, count: count, limit: limit)
                outcomes[strategy, default: []].append(outcome)
                context.progress(String(
                    format: "round %d, %@: %d successes in %.2f s (%.0f/s), %d 429s (%.2f per success)",
                    round + 1, strategy.rawValue, outcome.successes, outcome.seconds, outcome.throughput, outcome.rejections, outcome.rejectionsPerSuccess
                ))
            }
        }
        let pause = outcomes[.pause] ?? []
        let breaker = outcomes[.breaker] ?? []
        let perOperation = outcomes[.perOperation] ?? []
        let rateLimited = outcomes[.rateLimit] ?? []
        let note = "\(count.groupedDigits) operations, 8-slot queue, a downstream of \(limit * 4) requests/s in 0.25 s windows; "
            + String(format: "per-operation retries: %.2f 429s per success, %.0f successes/s; ", perOperation.map(\.rejectionsPerSuccess).median, perOperation.map(\.throughput).median)
            + "median of \(rounds) interleaved rounds; ratio = median of the rounds' ratios"
        /// The 429s per success and the throughput of `outcomes`, against the breaker's.
        func rows(_ outcomes: [Outcome], idPrefix: String, answer: String, throughputTarget: BenchmarkTarget?, notes: (String, String)) -> [BenchmarkResult] {
            let baselineName = "a RunCondition breaker tripped on each 429"
            return [
                BenchmarkResult(
                    id: "\(idPrefix).rejections", name: "429s per success, \(answer)",
                    value: outcomes.map(\.rejectionsPerSuccess).median, unit: .perSuccess,
                    baseline: breaker.map(\.rejectionsPerSuccess).median, baselineName: baselineName,
                    ratio: zip(outcomes, breaker).map { $0.rejectionsPerSuccess / max($1.rejectionsPerSuccess, 1e-9) }.median,
                    note: notes.0
                ),
                BenchmarkResult(
                    id: "\(idPrefix).throughput", name: "successes per second, \(answer)",
                    value: outcomes.map(\.throughput).median, unit: .operationsPerSecond,
                    baseline: breaker.map(\.throughput).median, baselineName: baselineName,
                    ratio: zip(outcomes, breaker).map { $0.throughput / $1.throughput }.median,
                    target: throughputTarget, note: notes.1
                ),
            ]
        }
        return rows(pause, idPrefix: id, answer: "pause(for:taggedWith:) on each 429", throughputTarget: .ratio(atLeast: 0.9), notes: (note, "the downstream's limit is \(limit * 4)/s"))
            + rows(
                rateLimited, idPrefix: "\(id).rate", answer: "startRateLimits at 95% of the downstream's rate", throughputTarget: nil,
                notes: ("a 429 still pauses the tag", "the limit: \(Int(Double(limit * 4) * 0.95)) starts/s, burst \(limit)")
            )
    }

    /// Runs `count` operations against a fresh downstream with `strategy`.
    static func run(_ strategy: Strategy, count: Int, limit: Int) throws -> Outcome {
        let directory = try TemporaryDirectory("b1-back-pressure")
        defer { directory.remove() }
        let operationQueue = OperationQueue()
        operationQueue.maxConcurrentOperationCount = 8
        operationQueue.isSuspended = true
        var configuration = PersistentOperationQueue.Configuration()
        if strategy == .rateLimit {
            configuration.startRateLimits = ["api": StartRateLimit(startsPerSecond: Double(limit) * 4 * 0.95, burst: limit)]
        }
        let queue = try PersistentOperationQueue(directory: directory.url, operationQueue: operationQueue, configuration: configuration)
        defer { queue.close() }
        queue.register(DownstreamCall.self)
        let breaker = ManualRunCondition(isSatisfied: true)
        queue.register(breaker, as: "downstream")
        let world = DownstreamWorld(strategy: strategy, service: RateLimitedService(limit: limit, window: 0.25), queue: queue, breaker: breaker)
        let calls = (0..<count).map { _ in DownstreamCall(payload: .init()) }
        for call in calls { call.world = world }
        let options = EnqueueOptions(tags: ["api"], conditions: strategy == .breaker ? ["downstream"] : [])
        for start in stride(from: 0, to: count, by: 500) {
            try queue.addOperations(Array(calls[start..<min(start + 500, count)]), options: options)
        }
        let start = Timing.now()
        operationQueue.isSuspended = false
        let deadline = start + 300 * 1_000_000_000
        while world.service.successes < count {
            guard Timing.now() < deadline else { throw BenchmarkFailure("B1 \(strategy.rawValue): not done within 300 s") }
            Thread.sleep(forTimeInterval: 0.002)
        }
        let seconds = Timing.seconds(from: start, to: Timing.now())
        queue.waitUntilAllOperationsAreFinished()
        guard calls.allSatisfy({ $0.outcome?.isSuccess == true }) else { throw BenchmarkFailure("B1 \(strategy.rawValue): an operation did not succeed") }
        return Outcome(seconds: seconds, successes: world.service.successes, rejections: world.service.rejections)
    }
}

/// The downstream: at most `limit` requests per window; the rest get 429 and the time left
/// until the next window.
final class RateLimitedService: @unchecked Sendable {
    // @unchecked: the counters are only touched under `lock`.
    private let lock = NSLock()
    private let limit: Int
    private let window: UInt64
    private var windowStart: UInt64 = 0
    private var inWindow = 0
    private var accepted = 0
    private var refused = 0

    init(limit: Int, window: TimeInterval) {
        self.limit = limit
        self.window = UInt64(window * 1e9)
    }

    /// `nil` when accepted; otherwise the Retry-After, in seconds.
    func request() -> TimeInterval? {
        let now = Timing.now()
        return lock.withLock {
            if now >= windowStart + window {
                windowStart = now - (now - windowStart) % window
                inWindow = 0
            }
            guard inWindow < limit else {
                refused += 1
                return Double(windowStart + window - now) / 1e9
            }
            inWindow += 1
            accepted += 1
            return nil
        }
    }

    var successes: Int { lock.withLock { accepted } }
    var rejections: Int { lock.withLock { refused } }
}

/// What the operations of one run share.
final class DownstreamWorld: @unchecked Sendable {
    // @unchecked: constants, and `breakerReopensAt` only touched under `lock`.
    let strategy: BackPressureBenchmark.Strategy
    let service: RateLimitedService
    weak var queue: PersistentOperationQueue?
    let breaker: ManualRunCondition
    private let lock = NSLock()
    private var breakerClosesAt: UInt64 = 0

    init(strategy: BackPressureBenchmark.Strategy, service: RateLimitedService, queue: PersistentOperationQueue, breaker: ManualRunCondition) {
        self.strategy = strategy
        self.service = service
        self.queue = queue
        self.breaker = breaker
    }

    /// The hand-made breaker: closed until `retryAfter` from now (the latest such date wins).
    func tripBreaker(for retryAfter: TimeInterval) {
        let until = Timing.now() + UInt64(retryAfter * 1e9)
        let isNew = lock.withLock { () -> Bool in
            guard until > breakerClosesAt else { return false }
            breakerClosesAt = until
            return true
        }
        guard isNew else { return }
        breaker.isSatisfied = false
        DispatchQueue.global().asyncAfter(deadline: DispatchTime(uptimeNanoseconds: until)) { [self] in
            if lock.withLock({ breakerClosesAt == until }) { breaker.isSatisfied = true }
        }
    }
}

/// One request to the downstream per attempt, 2 ms long, on a thread of its own.
final class DownstreamCall: RetryingOperation, PersistentOperation, @unchecked Sendable {
    // @unchecked: `world` is set before the operation is added and only read afterwards.
    struct Payload: Codable, Sendable {}
    static let persistenceIdentifier = "benchmarks.downstream-call"
    let payload: Payload
    var world: DownstreamWorld?

    init(payload: Payload) {
        self.payload = payload
        super.init()
    }

    override var isAsynchronous: Bool { true }

    override func startBaseOperation(isRetry: Bool) {
        guard let world else { return baseOperationEnded(failingWith: CocoaError(.featureUnsupported)) }
        Thread.detachNewThread { [self] in
            Thread.sleep(forTimeInterval: 0.002)
            guard let retryAfter = world.service.request() else { return baseOperationEnded() }
            switch world.strategy {
            case .perOperation:
                baseOperationEnded(needsRetryIn: retryAfter, countsTowardRetryLimit: false)
            case .breaker:
                world.tripBreaker(for: retryAfter)
                baseOperationEnded(needsRetryIn: 0, countsTowardRetryLimit: false)
            case .pause, .rateLimit:
                world.queue?.pause(for: retryAfter, taggedWith: "api")
                baseOperationEnded(needsRetryIn: 0, countsTowardRetryLimit: false)
            }
        }
    }
}
