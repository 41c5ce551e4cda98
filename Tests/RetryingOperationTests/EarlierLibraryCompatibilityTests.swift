import Foundation
import Testing
import RetryingOperation

// Code written against the earlier RetryingOperation library, in its style: it must
// compile and behave unchanged.

/// A class-based helper with non-mutating methods, as the earlier protocol declared them.
final class LegacyImmediateRetryHelper: RetryHelper {
    let operation: RetryingOperation
    private(set) var setups = 0
    private(set) var teardowns = 0
    init(operation: RetryingOperation) { self.operation = operation }
    func setup() { setups += 1; operation.retryNow() }
    func teardown() { teardowns += 1 }
}

final class LegacySynchronousOperation: RetryingOperation, @unchecked Sendable {
    let retries: Int
    var checkStr = ""
    var helper: LegacyImmediateRetryHelper?
    init(retries: Int) { self.retries = retries }
    override var isAsynchronous: Bool { false }
    override func startBaseOperation(isRetry: Bool) {
        checkStr += "."
        if (numberOfRetries ?? 0) < retries {
            let helper = LegacyImmediateRetryHelper(operation: self)
            self.helper = helper
            baseOperationEnded(retryHelpers: [helper])
        } else {
            baseOperationEnded()
        }
    }
}

final class LegacyAsynchronousOperation: RetryingOperation, @unchecked Sendable {
    let retries: Int
    var checkStr = ""
    init(retries: Int) { self.retries = retries }
    override var isAsynchronous: Bool { true }
    override func startBaseOperation(isRetry: Bool) {
        DispatchQueue.global().async {
            self.checkStr += "."
            if (self.numberOfRetries ?? 0) < self.retries { self.baseOperationEnded(needsRetryIn: 0.001) }
            else { self.baseOperationEnded() }
        }
    }
}

@Suite(.timeLimit(.minutes(1)))
struct EarlierLibraryCompatibilityTests {
    @Test(arguments: [0, 1, 3])
    func synchronousSubclassWithClassHelpersRetriesAsBefore(retries: Int) async {
        let operation = LegacySynchronousOperation(retries: retries)
        let queue = OperationQueue()
        queue.maxConcurrentOperationCount = 1
        queue.addOperation(operation)
        await drain(queue)
        #expect(operation.checkStr == String(repeating: ".", count: retries + 1))
        if retries > 0 {
            #expect(operation.helper?.setups == 1 && operation.helper?.teardowns == 1)
        }
    }

    @Test(arguments: [0, 1, 3])
    func asynchronousSubclassWithRealTimersRetriesAsBefore(retries: Int) async {
        let operation = LegacyAsynchronousOperation(retries: retries)
        let queue = OperationQueue()
        queue.maxConcurrentOperationCount = 1
        queue.addOperation(operation)
        await drain(queue)
        #expect(operation.checkStr == String(repeating: ".", count: retries + 1))
        #expect(operation.outcome?.isSuccess == true)
    }

    @Test func wrapperWithTheLegacyInitialiserAndNoQueue() async {
        let runs = LockedBox<[Int]>([])
        let wrapper = RetryableOperationWrapper(baseOperation: FlakyDownload(failuresBeforeSuccess: 1, runs: runs, retryDelay: 0.001), baseOperationQueue: nil)
        let queue = OperationQueue()
        queue.addOperation(wrapper)
        await drain(queue)
        #expect(runs.withLock { $0 } == [0, 1])
        #expect(wrapper.currentBaseOperation.generation == 1)
    }
}
