import Foundation
import Testing
@testable import PersistentOperations

/// Records the name of each job as its attempt starts, and succeeds.
private final class NamedJob: RetryingOperation, PersistentOperation, @unchecked Sendable {
    static let persistenceIdentifier = "test.named-job"
    static let starts = Locked<[String: [String]]>([:])
    struct Payload: Codable, Sendable {
        var run: String
        var name: String
    }

    let payload: Payload

    init(payload: Payload) {
        self.payload = payload
        super.init()
    }

    override var isAsynchronous: Bool { false }

    override func startBaseOperation(isRetry: Bool) {
        Self.starts.withLock { $0[payload.run, default: []].append(payload.name) }
        baseOperationEnded()
    }
}

@Suite("Persistent queue: fair sharing among tags", .timeLimit(.minutes(1)))
struct FairShareTests {
    /// Adds a burst of 300 jobs of customer a, then 5 of customer b and 5 with no customer, to
    /// a suspended serial queue, resumes it, and returns the order the jobs started in.
    private func startOrder(prefix: String?) async throws -> [String] {
        let directory = try TemporaryDirectory()
        let run = UUID().uuidString
        var configuration = PersistentOperationQueue.Configuration()
        configuration.fairShareTagPrefix = prefix
        let operationQueue = OperationQueue()
        operationQueue.maxConcurrentOperationCount = 1
        operationQueue.isSuspended = true
        let queue = try PersistentOperationQueue(directory: directory.store, operationQueue: operationQueue, configuration: configuration)
        queue.register(NamedJob.self)
        func jobs(_ name: String, _ count: Int) -> [NamedJob] {
            (0..<count).map { NamedJob(payload: .init(run: run, name: "\(name)\($0)")) }
        }
        try queue.addOperations(jobs("a", 300), options: EnqueueOptions(tags: ["customer:a", "import"]))
        try queue.addOperations(jobs("b", 5), options: EnqueueOptions(tags: ["customer:b"]))
        try queue.addOperations(jobs("n", 5), options: EnqueueOptions(tags: ["other"]))
        operationQueue.isSuspended = false
        await queue.allOperationsFinished()
        queue.close()
        return NamedJob.starts.withLock { $0[run] ?? [] }
    }

    @Test func aBurstOfOneCustomerNoLongerDelaysTheOthersAndEachGroupKeepsItsOrder() async throws {
        let order = try await startOrder(prefix: "customer:")
        #expect(order.count == 310)
        // The first 64 of the burst were queued in the OperationQueue before the others came
        // (the slot window): then the three groups take turns
        #expect(Array(order.prefix(64)) == (0..<64).map { "a\($0)" })
        #expect(Array(order[64..<79]) == (0..<5).flatMap { ["a\(64 + $0)", "b\($0)", "n\($0)"] })
        #expect(Array(order.suffix(from: 79)) == (69..<300).map { "a\($0)" })
    }

    @Test func withoutAPrefixTheOrderIsFirstInFirstOut() async throws {
        let order = try await startOrder(prefix: nil)
        #expect(order == (0..<300).map { "a\($0)" } + (0..<5).map { "b\($0)" } + (0..<5).map { "n\($0)" })
    }

    @Test func priorityStillComesBeforeTheTurns() async throws {
        let directory = try TemporaryDirectory()
        let run = UUID().uuidString
        var configuration = PersistentOperationQueue.Configuration()
        configuration.fairShareTagPrefix = "customer:"
        let operationQueue = OperationQueue()
        operationQueue.maxConcurrentOperationCount = 1
        operationQueue.isSuspended = true
        let queue = try PersistentOperationQueue(directory: directory.store, operationQueue: operationQueue, configuration: configuration)
        queue.register(NamedJob.self)
        let burst = (0..<100).map { NamedJob(payload: .init(run: run, name: "a\($0)")) }
        try queue.addOperations(burst, options: EnqueueOptions(tags: ["customer:a"]))
        let urgent = NamedJob(payload: .init(run: run, name: "urgent"))
        urgent.queuePriority = .high
        try queue.addOperation(urgent, options: EnqueueOptions(tags: ["customer:a"]))
        operationQueue.isSuspended = false
        await queue.allOperationsFinished()
        queue.close()
        let order = NamedJob.starts.withLock { $0[run] ?? [] }
        // The high-priority job of the same group, whose turn comes after the whole burst,
        // gets the first slot freed, and the OperationQueue runs it before the 63 slots of
        // the burst queued there (a slot has its operation's priority)
        #expect(try #require(order.firstIndex(of: "urgent")) < 5)
        #expect(order.count == 101)
    }

    @Test func theGroupIsTheFirstTagOfThePrefixInSortedOrder() {
        #expect(FairShareRounds.group(of: ["x", "customer:b", "customer:a"], prefix: "customer:") == "customer:a")
        #expect(FairShareRounds.group(of: ["x"], prefix: "customer:") == "")
        var rounds = FairShareRounds()
        let round = FairShareRounds.ticksPerRound
        #expect([rounds.nextRound(for: "a"), rounds.nextRound(for: "a"), rounds.nextRound(for: "b")] == [0, round, 0])
        rounds.took(round: 5 * round)
        // A group that had nothing waiting starts at the current turn, not behind it
        #expect(rounds.nextRound(for: "b") == 5 * round)
        // And a group of weight 3 takes three turns in a round
        #expect((0..<4).map { _ in rounds.nextRound(for: "c", weight: 3) } == [5 * round, 5 * round + round / 3, 5 * round + 2 * round / 3, 6 * round])
    }

    @Test func aGroupOfWeightThreeTakesThreeTurnsForEveryTurnOfAGroupOfWeightOne() async throws {
        // Given a suspended serial queue where customer b has weight 3, and bursts of 300 jobs
        // of customer a, then 60 of customer b
        let directory = try TemporaryDirectory()
        let run = UUID().uuidString
        var configuration = PersistentOperationQueue.Configuration()
        configuration.fairShareTagPrefix = "customer:"
        configuration.fairShareWeights = ["customer:b": 3]
        let operationQueue = OperationQueue()
        operationQueue.maxConcurrentOperationCount = 1
        operationQueue.isSuspended = true
        let queue = try PersistentOperationQueue(directory: directory.store, operationQueue: operationQueue, configuration: configuration)
        queue.register(NamedJob.self)
        try queue.addOperations((0..<300).map { NamedJob(payload: .init(run: run, name: "a\($0)")) }, options: EnqueueOptions(tags: ["customer:a"]))
        try queue.addOperations((0..<60).map { NamedJob(payload: .init(run: run, name: "b\($0)")) }, options: EnqueueOptions(tags: ["customer:b"]))

        // When it runs
        operationQueue.isSuspended = false
        await queue.allOperationsFinished()
        queue.close()

        // Then after the slot window's 64, b takes three turns for each of a's, each group in order
        let order = NamedJob.starts.withLock { $0[run] ?? [] }
        #expect(order.count == 360)
        #expect(Array(order.prefix(64)) == (0..<64).map { "a\($0)" })
        #expect(Array(order[64..<144]) == (0..<20).flatMap { ["a\(64 + $0)", "b\(3 * $0)", "b\(3 * $0 + 1)", "b\(3 * $0 + 2)"] })
    }

    @Test func aWeightOutsideOneToAThousandIsRefused() throws {
        let directory = try TemporaryDirectory()
        for weight in [0, 1_001] {
            var configuration = PersistentOperationQueue.Configuration()
            configuration.fairShareWeights = ["customer:a": weight]
            #expect {
                _ = try PersistentOperationQueue(directory: directory.store, operationQueue: OperationQueue(), configuration: configuration)
            } throws: { ($0 as? PersistenceError)?.code == .invalidOptions }
        }
    }
}
