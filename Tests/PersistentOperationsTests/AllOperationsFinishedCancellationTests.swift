import Foundation
import Testing
@testable import PersistentOperations

@Suite("Persistent queue: a cancelled wait for all operations", .timeLimit(.minutes(1)))
struct AllOperationsFinishedCancellationTests {
    @Test func cancellingTheAwaitingTaskEndsTheWaitWithoutLeakingIt() async throws {
        // Given a queue with an operation due in an hour, and a task waiting for the queue
        let fixture = try QueueFixture()
        let later = fixture.upload("later")
        let result = try fixture.queue.addOperation(later, options: EnqueueOptions(notBefore: fixture.clock.now.addingTimeInterval(3600)))
        let waiter = Task { await fixture.queue.allOperationsFinished() }
        while fixture.queue.emptyWaiterCount == 0 { await Task.yield() }
        // When the waiting task is cancelled
        waiter.cancel()
        await waiter.value
        // Then the wait has ended, left no continuation behind, and the operation is still pending
        #expect(fixture.queue.emptyWaiterCount == 0)
        #expect(fixture.queue.operation(withID: result.id) != nil)
        #expect(try fixture.pendingRecords().count == 1)
        // And a wait that is not cancelled returns once the queue is empty
        let second = Task { await fixture.queue.allOperationsFinished() }
        while fixture.queue.emptyWaiterCount == 0 { await Task.yield() }
        fixture.queue.cancelAllOperations()
        await second.value
        #expect(later.finishedCancelled)
    }

    @Test func aTaskCancelledBeforeItWaitsReturnsAtOnce() async throws {
        // Given a queue with an operation due in an hour
        let fixture = try QueueFixture()
        try fixture.queue.addOperation(fixture.upload("later"), options: EnqueueOptions(notBefore: fixture.clock.now.addingTimeInterval(3600)))
        // When an already cancelled task waits for the queue
        await Task {
            withUnsafeCurrentTask { $0?.cancel() }
            await fixture.queue.allOperationsFinished()
        }.value
        // Then it returned without registering a waiter
        #expect(fixture.queue.emptyWaiterCount == 0)
        fixture.queue.cancelAllOperations()
        await fixture.queue.allOperationsFinished()
    }
}

extension PersistentOperationQueue {
    /// The tasks awaiting ``allOperationsFinished()`` now.
    var emptyWaiterCount: Int {
        state.withLock { $0.emptyWaiters.count }
    }
}
