import CrashHarness
import Foundation
import Testing
import RetryingOperation

@Suite struct RetryPolicyTests {
    @Test func constantLinearAndExponentialBackoffsGiveExactSequences() {
        let constant = RetryPolicy(backoff: .constant(3), jitter: .none)
        let linear = RetryPolicy(backoff: .linear(initial: 1, increment: 2), jitter: .none)
        let exponential = RetryPolicy(backoff: .exponential(initial: 0.5, multiplier: 3), maximumDelay: 100, jitter: .none)
        #expect((1...4).map(constant.delay(forRetry:)) == [3, 3, 3, 3])
        #expect((1...4).map(linear.delay(forRetry:)) == [1, 3, 5, 7])
        #expect((1...6).map(exponential.delay(forRetry:)) == [0.5, 1.5, 4.5, 13.5, 40.5, 100])
    }

    @Test func theCapAppliesBeforeJitterAndSurvivesOverflow() {
        let policy = RetryPolicy(retryLimit: .unlimited, backoff: .exponential(initial: 1, multiplier: 10), maximumDelay: 60, jitter: .none)
        #expect(policy.baseDelay(forRetry: 2) == 10)
        #expect(policy.baseDelay(forRetry: 3) == 60)
        #expect(policy.baseDelay(forRetry: 10_000) == 60)   // 10^9999 overflows to infinity
        #expect(policy.baseDelay(forRetry: 0) == 1)          // retry numbers start at 1
    }

    @Test func fullJitterWithASeededGeneratorIsReproducibleAndBounded() {
        let policy = RetryPolicy(backoff: .exponential(initial: 1, multiplier: 2), maximumDelay: 8, jitter: .full)
        var first = SeededGenerator(seed: 42)
        var second = SeededGenerator(seed: 42)
        let delays = (1...6).map { policy.delay(forRetry: $0, using: &first) }
        #expect(delays == (1...6).map { policy.delay(forRetry: $0, using: &second) })
        for (retry, delay) in zip(1..., delays) {
            #expect(delay >= 0 && delay <= policy.baseDelay(forRetry: retry))
        }
        #expect(Set(delays).count == delays.count, "full jitter spreads the delays")
    }

    @Test func equalJitterKeepsAtLeastHalfTheDelay() {
        let policy = RetryPolicy(backoff: .constant(10), maximumDelay: 10, jitter: .equal)
        var generator = SeededGenerator(seed: 7)
        let delays = (0..<1_000).map { _ in policy.delay(forRetry: 1, using: &generator) }
        #expect(delays.allSatisfy { $0 >= 5 && $0 <= 10 })
        #expect(delays.min()! < 5.1 && delays.max()! > 9.9)
    }

    @Test func retryLimitCountsRetriesNotAttempts() {
        let three = RetryPolicy(retryLimit: .maximum(3))
        #expect([0, 1, 2, 3, 4].map(three.allowsRetry(afterRetries:)) == [true, true, true, false, false])
        #expect(!RetryPolicy.never.allowsRetry(afterRetries: 0))
        #expect(RetryPolicy.persistent.allowsRetry(afterRetries: 1_000_000))
    }

    @Test func defaultsArePublishedConstants() {
        let policy = RetryPolicy()
        #expect(policy == .default)
        #expect(policy.retryLimit == RetryPolicy.defaultRetryLimit)
        #expect(policy.backoff == RetryPolicy.defaultBackoff)
        #expect(policy.maximumDelay == RetryPolicy.defaultMaximumDelay)
        #expect(policy.jitter == RetryPolicy.defaultJitter)
        #expect(RetryPolicy.constant(2, retryLimit: .maximum(1)) == RetryPolicy(retryLimit: .maximum(1), backoff: .constant(2), maximumDelay: 2, jitter: .none))
    }

    @Test(arguments: [RetryPolicy.default, .never, .interactive, .persistent, .constant(1.5)])
    func policiesRoundTripThroughJSONAndPropertyLists(policy: RetryPolicy) throws {
        let json = try JSONDecoder().decode(RetryPolicy.self, from: JSONEncoder().encode(policy))
        let plist = try PropertyListDecoder().decode([RetryPolicy].self, from: PropertyListEncoder().encode([policy]))
        #expect(json == policy)
        #expect(plist == [policy])
    }

    @Test(arguments: [
        #"{"retryLimit":{"maximum":{"_0":-1}},"backoff":{"constant":{"_0":1}},"maximumDelay":10,"jitter":"none"}"#,
        #"{"retryLimit":{"unlimited":{}},"backoff":{"exponential":{"initial":1,"multiplier":0.5}},"maximumDelay":10,"jitter":"none"}"#,
        #"{"retryLimit":{"unlimited":{}},"backoff":{"constant":{"_0":-3}},"maximumDelay":10,"jitter":"none"}"#,
        #"{"retryLimit":{"unlimited":{}},"backoff":{"constant":{"_0":1}},"maximumDelay":-1,"jitter":"none"}"#,
        #"{"retryLimit":{"unlimited":{}},"backoff":{"constant":{"_0":1}},"maximumDelay":10,"jitter":"sometimes"}"#,
    ])
    func invalidStoredPoliciesAreRejectedWithADecodingError(json: String) {
        #expect(throws: DecodingError.self) {
            try JSONDecoder().decode(RetryPolicy.self, from: Data(json.utf8))
        }
    }
}
