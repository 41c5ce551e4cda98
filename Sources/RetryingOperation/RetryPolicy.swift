import Foundation

/// How many times to retry and how long to wait before each retry.
///
/// A value type: build one, share it, store it (it is `Codable`), compare it. Every
/// default is a named constant, and the presets are static members, so call sites read
/// `.default`, `.never` or `.persistent`.
///
/// ```swift
/// let policy = RetryPolicy(
///     retryLimit: .maximum(5),
///     backoff: .exponential(initial: 0.5, multiplier: 2),
///     maximumDelay: 30,
///     jitter: .equal
/// )
/// policy.allowsRetry(afterRetries: 5)   // false
/// policy.delay(forRetry: 3)             // between 1 and 2 seconds
/// ```
///
/// The delay before retry *n* (1 for the first retry) is the backoff's base delay for *n*,
/// capped at ``maximumDelay``, then spread by ``jitter``.
public struct RetryPolicy: Codable, Hashable, Sendable {
    /// How many counted retries are allowed.
    public enum RetryLimit: Codable, Hashable, Sendable {
        /// Retry as long as it takes.
        case unlimited
        /// At most this many retries (0 means never retry).
        case maximum(Int)
    }

    /// How the base delay grows from one retry to the next.
    public enum Backoff: Codable, Hashable, Sendable {
        /// The same delay before every retry.
        case constant(TimeInterval)
        /// `initial`, then `initial + increment`, `initial + 2 × increment`, …
        case linear(initial: TimeInterval, increment: TimeInterval)
        /// `initial`, then `initial × multiplier`, `initial × multiplier²`, …
        case exponential(initial: TimeInterval, multiplier: Double)
    }

    /// How a delay is randomised so that many clients do not retry in lock step.
    public enum Jitter: String, Codable, Hashable, Sendable {
        /// Exactly the capped base delay.
        case none
        /// Uniformly random between 0 and the capped base delay ("full jitter").
        case full
        /// Half the capped base delay plus a uniformly random part of the other half
        /// ("equal jitter"): never less than half the delay.
        case equal
    }

    /// The default ``retryLimit``: ten retries. Enough to ride out a minute or two of
    /// trouble with the default backoff; few enough that a permanent failure surfaces.
    public static let defaultRetryLimit = RetryLimit.maximum(10)
    /// The default ``backoff``: 1 s, doubling — the usual choice for remote services.
    public static let defaultBackoff = Backoff.exponential(initial: 1, multiplier: 2)
    /// The default ``maximumDelay``: five minutes, so a long outage is still retried often
    /// enough to notice its end.
    public static let defaultMaximumDelay: TimeInterval = 300
    /// The default ``jitter``: full jitter, which spreads retries of many clients best.
    public static let defaultJitter = Jitter.full

    /// How many counted retries are allowed. Defaults to ``defaultRetryLimit``.
    public var retryLimit: RetryLimit
    /// How the base delay grows. Defaults to ``defaultBackoff``.
    public var backoff: Backoff
    /// The longest base delay, in seconds, applied before jitter. Defaults to
    /// ``defaultMaximumDelay``.
    public var maximumDelay: TimeInterval
    /// How the delay is randomised. Defaults to ``defaultJitter``.
    public var jitter: Jitter
    /// The longest an attempt may run, in seconds; `nil` (the default) for no limit.
    ///
    /// An attempt still running after this long is abandoned: the operation calls
    /// ``RetryingOperation/abandonBaseOperation(_:)`` (which calls
    /// ``RetryingOperation/cancelBaseOperation()`` unless overridden) and ends the attempt as
    /// a counted retry whose error is a ``RetryingOperationError`` with code
    /// ``RetryingOperationError/Code-swift.struct/attemptTimedOut``: the policy retries it
    /// after its backoff delay, or the operation fails with
    /// ``RetryingOperationError/Code-swift.struct/retryLimitReached``. What the abandoned
    /// attempt reports afterwards through ``RetryingOperation/baseOperationEnded(attempt:with:)``
    /// is ignored; a plain `baseOperationEnded` call cannot say which attempt it comes from, so
    /// it is ignored only during the wait that follows and would end the next attempt. The timer
    /// runs on the operation's ``RetryingOperation/retryScheduler``.
    ///
    /// ```swift
    /// var policy = RetryPolicy.default
    /// policy.attemptTimeout = 30      // a request that hangs is retried after 30 s
    /// ```
    public var attemptTimeout: TimeInterval?

    /// Creates a policy. Each parameter defaults to its named constant (no attempt timeout).
    ///
    /// - Precondition: Limits and delays are not negative, delays are finite, an
    ///   exponential multiplier is at least 1, and an attempt timeout is finite and positive.
    public init(
        retryLimit: RetryLimit = defaultRetryLimit,
        backoff: Backoff = defaultBackoff,
        maximumDelay: TimeInterval = defaultMaximumDelay,
        jitter: Jitter = defaultJitter,
        attemptTimeout: TimeInterval? = nil
    ) {
        self.retryLimit = retryLimit
        self.backoff = backoff
        self.maximumDelay = maximumDelay
        self.jitter = jitter
        self.attemptTimeout = attemptTimeout
        if let problem = validationProblem {
            preconditionFailure("invalid RetryPolicy: \(problem)")
        }
    }

    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        retryLimit = try container.decode(RetryLimit.self, forKey: .retryLimit)
        backoff = try container.decode(Backoff.self, forKey: .backoff)
        maximumDelay = try container.decode(TimeInterval.self, forKey: .maximumDelay)
        jitter = try container.decode(Jitter.self, forKey: .jitter)
        // Absent from policies encoded before attempt timeouts existed.
        attemptTimeout = try container.decodeIfPresent(TimeInterval.self, forKey: .attemptTimeout)
        if let problem = validationProblem {
            throw DecodingError.dataCorrupted(.init(codingPath: decoder.codingPath, debugDescription: "invalid RetryPolicy: \(problem)"))
        }
    }

    // MARK: Presets

    /// Ten retries, exponential backoff from 1 s, capped at five minutes, full jitter.
    public static let `default` = RetryPolicy()

    /// Never retries: the first error that asks the policy ends the operation.
    public static let never = RetryPolicy(retryLimit: .maximum(0))

    /// For work a user is waiting on: three quick retries after base delays of 0.2 s,
    /// 0.4 s and 0.8 s (capped at 2 s), with equal jitter so a retry waits at least half.
    public static let interactive = RetryPolicy(
        retryLimit: .maximum(3),
        backoff: .exponential(initial: 0.2, multiplier: 2),
        maximumDelay: 2,
        jitter: .equal
    )

    /// For background work that must eventually happen (uploads, sync): retries forever,
    /// exponential backoff from 5 s, capped at one hour, full jitter.
    public static let persistent = RetryPolicy(
        retryLimit: .unlimited,
        backoff: .exponential(initial: 5, multiplier: 2),
        maximumDelay: 3600,
        jitter: .full
    )

    /// The same `delay` before each of at most `retryLimit` retries, without jitter.
    ///
    /// ```swift
    /// operation.retryPolicy = .constant(2, retryLimit: .maximum(3))
    /// ```
    public static func constant(_ delay: TimeInterval, retryLimit: RetryLimit = defaultRetryLimit) -> RetryPolicy {
        RetryPolicy(retryLimit: retryLimit, backoff: .constant(delay), maximumDelay: max(delay, 0), jitter: .none)
    }

    // MARK: Decisions

    /// Whether one more counted retry is allowed after `numberOfRetries` retries.
    ///
    /// ```swift
    /// RetryPolicy.never.allowsRetry(afterRetries: 0)   // false
    /// ```
    public func allowsRetry(afterRetries numberOfRetries: Int) -> Bool {
        switch retryLimit {
        case .unlimited: return true
        case .maximum(let limit): return numberOfRetries < limit
        }
    }

    /// The delay before retry `retry` (1 for the first), capped, before jitter.
    ///
    /// ```swift
    /// RetryPolicy(backoff: .linear(initial: 1, increment: 2), jitter: .none)
    ///     .baseDelay(forRetry: 3)   // 5
    /// ```
    public func baseDelay(forRetry retry: Int) -> TimeInterval {
        let step = Double(max(retry, 1) - 1)
        let uncapped: Double
        switch backoff {
        case .constant(let delay):
            uncapped = delay
        case .linear(let initial, let increment):
            uncapped = initial + increment * step
        case .exponential(let initial, let multiplier):
            uncapped = initial * pow(multiplier, step)
        }
        // `pow` overflows to +infinity for large retries; the cap makes that finite.
        guard uncapped.isFinite else { return maximumDelay }
        return min(max(uncapped, 0), maximumDelay)
    }

    /// The delay before retry `retry` (1 for the first), with jitter drawn from
    /// `generator`. Pass a seeded generator to get a reproducible sequence.
    ///
    /// ```swift
    /// var generator = SystemRandomNumberGenerator()
    /// let wait = RetryPolicy.default.delay(forRetry: 2, using: &generator)
    /// ```
    public func delay<Generator: RandomNumberGenerator>(forRetry retry: Int, using generator: inout Generator) -> TimeInterval {
        let base = baseDelay(forRetry: retry)
        guard base > 0 else { return 0 }
        switch jitter {
        case .none:
            return base
        case .full:
            return Double.random(in: 0...base, using: &generator)
        case .equal:
            return base / 2 + Double.random(in: 0...(base / 2), using: &generator)
        }
    }

    /// The delay before retry `retry` (1 for the first), with jitter from the system's
    /// random number generator.
    ///
    /// ```swift
    /// let wait = RetryPolicy.default.delay(forRetry: 1)   // between 0 and 1 second
    /// ```
    public func delay(forRetry retry: Int) -> TimeInterval {
        var generator = SystemRandomNumberGenerator()
        return delay(forRetry: retry, using: &generator)
    }

    // MARK: Validation

    private var validationProblem: String? {
        if case .maximum(let limit) = retryLimit, limit < 0 {
            return "retryLimit .maximum(\(limit)) is negative; use .unlimited for no limit"
        }
        guard maximumDelay.isFinite, maximumDelay >= 0 else {
            return "maximumDelay \(maximumDelay) must be a finite, non-negative number of seconds"
        }
        if let attemptTimeout, !(attemptTimeout.isFinite && attemptTimeout > 0) {
            return "attemptTimeout \(attemptTimeout) must be a finite, positive number of seconds"
        }
        switch backoff {
        case .constant(let delay):
            if !(delay.isFinite && delay >= 0) { return "constant delay \(delay) must be finite and non-negative" }
        case .linear(let initial, let increment):
            if !(initial.isFinite && initial >= 0 && increment.isFinite && increment >= 0) {
                return "linear backoff (initial \(initial), increment \(increment)) must be finite and non-negative"
            }
        case .exponential(let initial, let multiplier):
            if !(initial.isFinite && initial >= 0) { return "exponential initial delay \(initial) must be finite and non-negative" }
            if !(multiplier.isFinite && multiplier >= 1) { return "exponential multiplier \(multiplier) must be finite and at least 1" }
        }
        return nil
    }
}
