import Foundation
import XCTest
@testable import RetryingOperation

/// What a retrying operation does on the main thread, beside a plain `Operation` doing the
/// same: `start()` by hand returns finished, and every attempt of a synchronous operation on
/// `OperationQueue.main` runs on the main thread.
///
/// XCTest, not swift-testing: XCTest runs its tests on the process's main thread, where
/// `OperationQueue.current` is the main queue even outside any operation. (swift-testing runs
/// tests on other threads; on Linux the main queue is then drained by a pool thread.) The main
/// queue's operations run while the test spins the main run loop.
final class MainThreadSemanticsTests: XCTestCase {
    func testASynchronousOperationStartedByHandOnTheMainThreadFinishesInsideStart() {
        // Given a synchronous operation whose first attempt asks for a retry, on the main thread
        XCTAssertTrue(Thread.isMainThread)
        let operation = ThreadRecordingOperation(asynchronous: false, steps: [.retryIn(0.01), .retryIn(0), .succeed])

        // When it is started by hand
        operation.start()

        // Then start() returns with it finished, every attempt having run on the main thread
        XCTAssertTrue(operation.isFinished)
        XCTAssertEqual(operation.outcome?.isSuccess, true)
        XCTAssertEqual(operation.attemptThreads, [.main, .main, .main])
    }

    func testAPlainSynchronousOperationStartedByHandOnTheMainThreadFinishesInsideStart() {
        let ranOnMain = LockedBox(false)
        let operation = BlockOperation { ranOnMain.withLock { $0 = Thread.isMainThread } }
        operation.start()
        XCTAssertTrue(operation.isFinished)
        XCTAssertTrue(ranOnMain.withLock { $0 })
    }

    func testEveryAttemptOfASynchronousOperationOnTheMainQueueRunsOnTheMainThread() {
        // Given a synchronous operation on the main queue whose first two attempts ask for a
        // retry, beside a plain operation
        let operation = ThreadRecordingOperation(asynchronous: false, steps: [.retryIn(0.01), .retryIn(0), .succeed])
        let plainRanOnMain = LockedBox(false)
        let plain = BlockOperation { plainRanOnMain.withLock { $0 = Thread.isMainThread } }

        // When the main queue runs them (the main run loop turning)
        OperationQueue.main.addOperation(operation)
        OperationQueue.main.addOperation(plain)
        spinMainRunLoop(until: { operation.isFinished && plain.isFinished }, seconds: 20)

        // Then every attempt started on the main thread, where the plain operation ran
        XCTAssertEqual(operation.outcome?.isSuccess, true)
        XCTAssertEqual(operation.attemptThreads, [.main, .main, .main])
        XCTAssertTrue(plainRanOnMain.withLock { $0 })
    }

    func testTheRetriesOfAnAsynchronousOperationOnTheMainQueueStartOnABackgroundThread() {
        // Given an asynchronous operation on the main queue whose first attempt asks for a retry
        let operation = ThreadRecordingOperation(asynchronous: true, steps: [.retryIn(0.01), .succeed])
        OperationQueue.main.addOperation(operation)
        spinMainRunLoop(until: { operation.isFinished }, seconds: 20)
        // Then its first attempt started on the main thread and its retry on another, as
        // documented
        XCTAssertEqual(operation.outcome?.isSuccess, true)
        XCTAssertEqual(operation.attemptThreads, [.main, .other])
    }

    func testASynchronousOperationOnTheMainQueueDoesNotHoldTheMainThreadWhileItWaits() {
        // Given a synchronous operation on the main queue waiting 0.2 s for its retry
        let operation = ThreadRecordingOperation(asynchronous: false, steps: [.retryIn(0.2), .succeed])
        OperationQueue.main.addOperation(operation)
        spinMainRunLoop(until: { operation.attemptCount == 1 }, seconds: 20)

        // When a block is put on the main queue during the wait, it runs before the retry
        let ranDuringWait = LockedBox<Bool?>(nil)
        DispatchQueue.main.async { ranDuringWait.withLock { $0 = operation.attemptCount == 1 } }
        spinMainRunLoop(until: { ranDuringWait.withLock { $0 } != nil }, seconds: 20)
        XCTAssertEqual(ranDuringWait.withLock { $0 }, true)

        spinMainRunLoop(until: { operation.isFinished }, seconds: 20)
        XCTAssertEqual(operation.outcome?.isSuccess, true)
    }

    /// Runs the main run loop (which drains the main dispatch queue) until `condition` holds,
    /// failing the test after `seconds`.
    private func spinMainRunLoop(until condition: () -> Bool, seconds: TimeInterval, line: UInt = #line) {
        let deadline = Date().addingTimeInterval(seconds)
        while !condition() {
            guard Date() < deadline else {
                XCTFail("condition not met within \(seconds) s", line: line)
                return
            }
            _ = RunLoop.main.run(mode: .default, before: Date().addingTimeInterval(0.01))
        }
    }
}
