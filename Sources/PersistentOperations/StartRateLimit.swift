import Foundation

/// How fast the attempts of the operations that carry a tag may start: see
/// ``PersistentOperationQueue/Configuration/startRateLimits``.
///
/// A token bucket: it holds up to ``burst`` starts, each attempt that starts takes one, and it
/// gains ``startsPerSecond`` a second. A bucket starts full.
///
/// ```swift
/// var configuration = PersistentOperationQueue.Configuration()
/// // 2 requests a second, never more than 1 at once after a quiet spell
/// configuration.startRateLimits = ["api:geocoder": StartRateLimit(startsPerSecond: 2)]
/// ```
public struct StartRateLimit: Sendable, Hashable {
    /// The average rate of starts, per second (more than 0).
    public var startsPerSecond: Double
    /// How many attempts may start at once after a quiet spell (at least 1).
    public var burst: Int

    /// A limit of `startsPerSecond` starts a second on average, `burst` at once.
    public init(startsPerSecond: Double, burst: Int = 1) {
        self.startsPerSecond = startsPerSecond
        self.burst = burst
    }
}
