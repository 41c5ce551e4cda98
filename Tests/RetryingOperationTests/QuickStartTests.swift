import Foundation
import Testing
import RetryingOperation

// The README's quick start, compiled and run here so it cannot rot.

struct ServerBusy: Error {}

/// Stands in for a network client in the quick start.
final class FakeUploader: @unchecked Sendable {
    // @unchecked: `failuresLeft` is only touched while `lock` is held.
    private let lock = NSLock()
    private var failuresLeft: Int
    init(failures: Int) { failuresLeft = failures }

    func upload(_ file: URL, completion: @escaping @Sendable (Result<Void, any Error>) -> Void) {
        lock.lock()
        let fails = failuresLeft > 0
        failuresLeft -= 1
        lock.unlock()
        DispatchQueue.global().async { completion(fails ? .failure(ServerBusy()) : .success(())) }
    }
}

// snippet: quick-start
final class UploadOperation: RetryingOperation, @unchecked Sendable {
    let file: URL
    let uploader: FakeUploader

    init(file: URL, uploader: FakeUploader) {
        self.file = file
        self.uploader = uploader
        super.init()
        retryPolicy = RetryPolicy(retryLimit: .maximum(5), backoff: .exponential(initial: 1, multiplier: 2))
    }

    override var isAsynchronous: Bool { true }

    override func startBaseOperation(isRetry: Bool) {
        uploader.upload(file) { result in
            switch result {
            case .success:
                self.baseOperationEnded()
            case .failure(let error as ServerBusy):
                self.baseOperationEnded(withRetriableError: error)   // the policy decides
            case .failure(let error):
                self.baseOperationEnded(failingWith: error)          // no retry
            }
        }
    }
}
// end snippet

@Suite(.timeLimit(.minutes(1)))
struct QuickStartTests {
    @Test func quickStartUploadRetriesUntilTheServerAccepts() async {
        let uploader = FakeUploader(failures: 2)
        let clock = ManualRetryScheduler()
        // snippet: quick-start-use
        let queue = OperationQueue()
        let upload = UploadOperation(file: URL(fileURLWithPath: "/tmp/photo.jpg"), uploader: uploader)
        upload.retryScheduler = clock          // tests only: time moves when the test says so
        queue.addOperation(upload)
        // end snippet
        for _ in 0..<2 {
            await clock.waitForScheduledRetries(count: 1)
            clock.advanceToNextRetry()
        }
        // snippet: quick-start-outcome
        switch await upload.finalOutcome {
        case .succeeded: print("uploaded after \(upload.numberOfAttempts) attempts")
        case .failed(let error): print("gave up: \(error)")
        case .cancelled: print("cancelled")
        }
        // end snippet
        #expect(upload.outcome?.isSuccess == true)
        #expect(upload.numberOfAttempts == 3)
    }
}
