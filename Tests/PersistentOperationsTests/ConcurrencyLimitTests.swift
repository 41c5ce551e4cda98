import CrashHarness
import Foundation
import Testing
@testable import PersistentOperations

/// Tracks how many attempts of each tag run at once.
final class TagConcurrency: Sendable {
    private let state = Locked<(running: [String: Int], peak: [String: Int], attempts: Int)>(([:], [:], 0))

    func begin(_ tags: [String]) {
        state.withLock { state in
            state.attempts += 1
            for tag in tags + ["*"] {
                state.running[tag, default: 0] += 1
                state.peak[tag] = max(state.peak[tag] ?? 0, state.running[tag]!)
            }
        }
    }

    func end(_ tags: [String]) {
        state.withLock { state in
            for tag in tags + ["*"] { state.running[tag, default: 0] -= 1 }
        }
    }

    /// What gated attempts wait for: each ends once the test lets one through.
    let gate = DispatchSemaphore(value: 0)

    /// The most attempts of `tag` ("*": of any) seen running at once.
    func peak(_ tag: String) -> Int { state.withLock { $0.peak[tag] ?? 0 } }
    var attempts: Int { state.withLock { $0.attempts } }

    /// The trackers of the running tests, by name (an operation finds its own by its payload).
    static let byName = Locked<[String: TagConcurrency]>([:])
}

/// An attempt of `milliseconds` that reports its tags' concurrency, retrying `retries` times
/// (after 5 ms) before it succeeds.
final class LimitedWork: RetryingOperation, PersistentOperation, @unchecked Sendable {
    // @unchecked: the payload never changes; the rest belongs to RetryingOperation.
    struct Payload: Codable, Sendable {
        var tracker: String
        var tags: [String]
        var milliseconds = 5
        var retries = 0
        /// Whether each attempt also waits for the tracker's gate.
        var isGated = false
    }

    struct Busy: Error {}

    static let persistenceIdentifier = "test.limited-work"
    let payload: Payload

    init(payload: Payload) {
        self.payload = payload
        super.init()
        retryPolicy = .constant(0.005, retryLimit: .maximum(payload.retries + 1))
    }

    override var isAsynchronous: Bool { true }

    override func startBaseOperation(isRetry: Bool) {
        let tracker = TagConcurrency.byName.withLock { $0[payload.tracker] }
        tracker?.begin(payload.tags)
        let attempt = numberOfAttempts
        DispatchQueue.global().asyncAfter(deadline: .now() + .milliseconds(payload.milliseconds)) { [self] in
            if payload.isGated { tracker?.gate.wait() }
            tracker?.end(payload.tags)
            if attempt <= payload.retries {
                baseOperationEnded(withRetriableError: Busy())
            } else {
                baseOperationEnded()
            }
        }
    }
}

@Suite("Persistent queue: concurrency limits by tag", .timeLimit(.minutes(1)))
struct ConcurrencyLimitTests {
    /// A queue of `width` slots with `limits`, and a tracker of its attempts.
    static func queue(width: Int, limits: [String: Int]) throws -> (PersistentOperationQueue, TagConcurrency, String, TemporaryDirectory) {
        let directory = try TemporaryDirectory()
        let operationQueue = OperationQueue()
        operationQueue.maxConcurrentOperationCount = width
        var configuration = PersistentOperationQueue.Configuration()
        configuration.concurrencyLimits = limits
        let queue = try PersistentOperationQueue(directory: directory.store, operationQueue: operationQueue, configuration: configuration)
        queue.register(LimitedWork.self)
        let name = UUID().uuidString
        let tracker = TagConcurrency()
        TagConcurrency.byName.withLock { $0[name] = tracker }
        return (queue, tracker, name, directory)
    }

    @Test func aLimitedTagRunsAtMostItsLimitAtOnceWhileOtherWorkUsesTheOtherSlots() async throws {
        // Given an 8-slot queue where the tag "api:geocoder" may run 2 attempts at once
        let (queue, tracker, name, directory) = try Self.queue(width: 8, limits: ["api:geocoder": 2])
        defer { queue.close(); withExtendedLifetime(directory) {} }

        // When 30 geocoder calls (10 of them retrying once) and 30 other jobs are added
        var geocoder: [any PersistentOperation] = []
        for index in 0..<30 {
            geocoder.append(LimitedWork(payload: .init(tracker: name, tags: ["api:geocoder"], milliseconds: 10, retries: index % 3 == 0 ? 1 : 0)))
        }
        try queue.addOperations(geocoder, options: EnqueueOptions(tags: ["api:geocoder"]))
        let others = (0..<30).map { _ in LimitedWork(payload: .init(tracker: name, tags: [], milliseconds: 10)) }
        try queue.addOperations(others)
        // (While it runs, those waiting for the limit are reported queued.)
        let counts = try queue.counts()
        #expect(counts.waitingForConditions == 0)
        await queue.allOperationsFinished()

        // Then never more than 2 geocoder attempts ran at once, every attempt ran, and the
        // other jobs used the other slots
        #expect(tracker.peak("api:geocoder") == 2)
        #expect(tracker.attempts == 70)
        #expect(tracker.peak("*") > 2)
        #expect(try queue.counts().pending == 0)
    }

    @Test func anOperationWithTwoLimitedTagsObeysBothAndCancellingAParkedOneStallsNothing() async throws {
        // Given limits of 1 on "a" and 2 on "b"
        let (queue, tracker, name, directory) = try Self.queue(width: 6, limits: ["a": 1, "b": 2])
        defer { queue.close(); withExtendedLifetime(directory) {} }

        // When operations tagged a, b and both are added, and some waiting ones are cancelled
        var ids: [PersistentOperationID] = []
        for index in 0..<45 {
            let tags = [["a"], ["b"], ["a", "b"]][index % 3]
            let work = LimitedWork(payload: .init(tracker: name, tags: tags, milliseconds: 4))
            ids.append(try queue.addOperation(work, options: EnqueueOptions(tags: Set(tags))).id)
        }
        for id in ids[30...].enumerated().filter({ $0.offset % 2 == 0 }).map(\.element) {
            _ = queue.cancelOperation(withID: id)
        }
        await queue.allOperationsFinished()

        // Then a ran one at a time and b two at most, and all the rest ran
        #expect(tracker.peak("a") == 1)
        #expect(tracker.peak("b") <= 2)
        #expect(tracker.attempts >= 37 && tracker.attempts <= 45)
        #expect(try queue.counts().pending == 0)
    }

    @Test func whileALimitHoldsThemTheWaitingOperationsAreReportedQueued() async throws {
        // Given a limit of 1 and three operations of the tag whose attempts run until the test
        // lets them end
        let (queue, tracker, name, directory) = try Self.queue(width: 4, limits: ["slow": 1])
        defer { queue.close(); withExtendedLifetime(directory) {} }
        let ids = try (0..<3).map { _ in
            try queue.addOperation(LimitedWork(payload: .init(tracker: name, tags: ["slow"], milliseconds: 1, isGated: true)), options: EnqueueOptions(tags: ["slow"])).id
        }
        // When the first runs
        let deadline = Date().addingTimeInterval(30)
        while try queue.counts().running == 0, Date() < deadline { try await Task.sleep(for: .milliseconds(5)) }

        // Then one runs and the two others are queued, not waiting for a condition
        let counts = try queue.counts()
        #expect(counts.running == 1 && counts.queued == 2 && counts.waitingForConditions == 0)
        let infos = queue.operations(taggedWith: "slow")
        #expect(infos.filter { $0.state == .running }.count == 1 && infos.filter { $0.state == .queued }.count == 2)
        #expect(Set(infos.map(\.id)) == Set(ids))
        // And once let through, they run one after the other
        for _ in ids { tracker.gate.signal() }
        await queue.allOperationsFinished()
        #expect(tracker.peak("slow") == 1 && tracker.attempts == 3)
    }

    @Test func aLimitBelowOneIsRefused() throws {
        let directory = try TemporaryDirectory()
        var configuration = PersistentOperationQueue.Configuration()
        configuration.concurrencyLimits = ["ok": 3, "bad": 0]
        #expect {
            _ = try PersistentOperationQueue(directory: directory.store, operationQueue: OperationQueue(), configuration: configuration)
        } throws: { error in
            guard let error = error as? PersistenceError else { return false }
            return error.code == .invalidOptions && error.message.contains("\"bad\"")
        }
    }

    @Test(arguments: [1, 2, 3] as [UInt64])
    func randomWorkUnderRandomLimitsNeverExceedsThemAndAlwaysDrains(seed: UInt64) async throws {
        // Given random limits on three tags
        var random = SeededGenerator(seed: seed)
        let limits = ["x": Int.random(in: 1...3, using: &random), "y": Int.random(in: 1...3, using: &random), "z": Int.random(in: 1...3, using: &random)]
        let (queue, tracker, name, directory) = try Self.queue(width: Int.random(in: 2...8, using: &random), limits: limits)
        defer { queue.close(); withExtendedLifetime(directory) {} }

        // When 120 operations with random tags, durations and retries are added in batches and
        // one by one, some cancelled
        var ids: [PersistentOperationID] = []
        for round in 0..<12 {
            var batch: [any PersistentOperation] = []
            for _ in 0..<10 {
                let tags = ["x", "y", "z", "free"].filter { _ in Bool.random(using: &random) }
                let work = LimitedWork(payload: .init(
                    tracker: name, tags: tags, milliseconds: Int.random(in: 1...6, using: &random), retries: Int.random(in: 0...1, using: &random)
                ))
                if round.isMultiple(of: 2) {
                    batch.append(work)
                } else {
                    ids.append(try queue.addOperation(work, options: EnqueueOptions(tags: Set(tags))).id)
                }
            }
            if !batch.isEmpty { ids += try queue.addOperations(batch, options: EnqueueOptions()) { Set(($0 as! LimitedWork).payload.tags) } }
            if let victim = ids.randomElement(using: &random) { _ = queue.cancelOperation(withID: victim) }
        }
        await queue.allOperationsFinished()

        // Then no limit was ever exceeded, and everything ended
        for (tag, limit) in limits {
            #expect(tracker.peak(tag) <= limit, "\(tag): peak \(tracker.peak(tag)), limit \(limit)")
        }
        #expect(try queue.counts().pending == 0)
        #expect(queue.state.withLock { $0.limitCounts.isEmpty })
    }
}
