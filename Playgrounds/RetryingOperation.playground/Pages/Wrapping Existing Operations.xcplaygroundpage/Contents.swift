/*:
 [Previous](@previous)

 # Wrapping existing operations

 Sometimes the operation that should be retried is not yours to change: it comes from a
 framework or another module and subclasses `Operation` directly. A
 `RetryableOperationWrapper` makes it retryable anyway. It runs the operation, asks it
 whether to retry once it has finished, and after the wait runs a *fresh copy* of it — an
 `Operation` runs only once.
 */
import Foundation
import RetryingOperation

//: Pretend this operation comes from a library: it renders a thumbnail and keeps the result or the error.
enum RenderError: Error {
    case outOfMemory        // transient: worth another try
    case unsupportedFormat  // permanent
    case imageDeleted
}

/// A stand-in for a renderer: answers with `answers`, one per render; the last one repeats.
final class FakeRenderer: @unchecked Sendable {
    // @unchecked: `answers` and `images` are only touched while `lock` is held.
    private let lock = NSLock()
    private var answers: [Result<String, RenderError>]
    private var images: Set<String>

    init(images: Set<String>, answers: [Result<String, RenderError>]) {
        self.images = images
        self.answers = answers
    }

    func render(_ image: String) -> Result<String, RenderError> {
        lock.lock()
        defer { lock.unlock() }
        return answers.count > 1 ? answers.removeFirst() : answers[0]
    }

    func hasImage(_ image: String) -> Bool {
        lock.lock()
        defer { lock.unlock() }
        return images.contains(image)
    }

    func delete(_ image: String) {
        lock.lock()
        images.remove(image)
        lock.unlock()
    }
}

final class ThumbnailOperation: Operation, @unchecked Sendable {
    // @unchecked: `result` is written by `main()` and read only after the operation finished.
    let image: String
    let renderer: FakeRenderer
    private(set) var result: Result<String, RenderError>?

    init(image: String, renderer: FakeRenderer) {
        self.image = image
        self.renderer = renderer
    }

    override func main() {
        result = renderer.render(image)
    }
}

func describe(_ result: Result<String, RenderError>?) -> String {
    switch result {
    case .success(let thumbnail)?: return thumbnail
    case .failure(let error)?: return "error \(error)"
    case nil: return "not run"
    }
}

/*:
 ## Making it retryable

 Conform the class to `RetryableOperation` in an extension. Two questions to answer:
 (`ThumbnailOperation` is final, so `Self(…)` builds the copy. A framework's class is
 `open`, its initializer not `required`: conform a final subclass of it instead, whose
 `operationForRetrying()` returns the subclass — see the README.)

 - `retryHelpers(from:)`, asked after each run: `nil` to stop (success, or an error that
   retrying cannot fix), or the retry helpers to wait for before the next run — here a
   timer. An empty array waits for a manual `retryNow()`.
 - `operationForRetrying()`: a new, unstarted operation that does the same work. An error
   thrown here ends the wrapper with that error.
 */
extension ThumbnailOperation: RetryableOperation {
    func retryHelpers<T>(from wrapper: RetryableOperationWrapper<T>) -> [RetryHelper]? {
        guard case .failure(.outOfMemory) = result else { return nil }   // done: no retry
        return [RetryingOperation.TimerRetryHelper(retryDelay: 0.05, retryingOperation: wrapper)]
    }

    func operationForRetrying() throws -> Self {
        guard renderer.hasImage(image) else { throw RenderError.imageDeleted }
        return Self(image: image, renderer: renderer)
    }
}

/*:
 ## Running the wrapper

 The wrapper is a `RetryingOperation` itself: add it to a queue, cancel it (the cancel
 reaches the operation running at the time), read its outcome. `retryLimit` caps the
 retries; base operations run on `baseOperationQueue` when you give one, otherwise the
 wrapper starts them itself.
 */
let queue = OperationQueue()
let renderQueue = OperationQueue()
renderQueue.maxConcurrentOperationCount = 1

print("Out of memory twice:")
let renderer = FakeRenderer(images: ["cat.jpg"], answers: [.failure(.outOfMemory), .failure(.outOfMemory), .success("thumbnail of cat.jpg")])
let thumbnail = ThumbnailOperation(image: "cat.jpg", renderer: renderer)
let wrapper = RetryableOperationWrapper(baseOperation: thumbnail, retryLimit: .maximum(3), baseOperationQueue: renderQueue)
queue.addOperation(wrapper)
queue.waitUntilAllOperationsAreFinished()

//: `originalBaseOperation` is the one you passed in; `currentBaseOperation` is the copy that ran last, and holds the result.
print("outcome: \(wrapper.outcome!), attempts: \(wrapper.numberOfAttempts), result: \(describe(wrapper.currentBaseOperation.result))")
precondition(wrapper.outcome?.isSuccess == true)
precondition(wrapper.numberOfAttempts == 3)
precondition(wrapper.originalBaseOperation === thumbnail && wrapper.currentBaseOperation !== thumbnail)
guard case .success("thumbnail of cat.jpg")? = wrapper.currentBaseOperation.result else { preconditionFailure("unexpected result") }

/*:
 ## How a wrapper ends

 The wrapper knows only what `retryHelpers(from:)` tells it. When that is `nil`, the
 wrapper's work is done and it succeeds — even if the base operation failed for good. The
 base operation's own result says how the work went.
 */
print("An unsupported format:")
let tiff = RetryableOperationWrapper(
    baseOperation: ThumbnailOperation(image: "cat.tiff", renderer: FakeRenderer(images: ["cat.tiff"], answers: [.failure(.unsupportedFormat)])),
    retryLimit: .maximum(3)
)
queue.addOperation(tiff)
queue.waitUntilAllOperationsAreFinished()
print("outcome: \(tiff.outcome!), attempts: \(tiff.numberOfAttempts), result: \(describe(tiff.currentBaseOperation.result))")
precondition(tiff.outcome?.isSuccess == true && tiff.numberOfAttempts == 1)
guard case .failure(.unsupportedFormat)? = tiff.currentBaseOperation.result else { preconditionFailure("unexpected result") }

//: When the operation still asks for a retry after `retryLimit` retries, the wrapper fails with `retryLimitReached`.
print("Always out of memory:")
let hopeless = RetryableOperationWrapper(
    baseOperation: ThumbnailOperation(image: "cat.jpg", renderer: FakeRenderer(images: ["cat.jpg"], answers: [.failure(.outOfMemory)])),
    retryLimit: .maximum(2)
)
queue.addOperation(hopeless)
queue.waitUntilAllOperationsAreFinished()
print("outcome: \(hopeless.outcome!), attempts: \(hopeless.numberOfAttempts)")
precondition((hopeless.outcome?.error as? RetryingOperationError)?.code == .retryLimitReached)
precondition(hopeless.numberOfAttempts == 3)

/*:
 When `operationForRetrying()` throws, the error becomes the wrapper's outcome — it is
 never swallowed. Here the image is deleted while the wrapper waits to retry. To delete it
 at exactly that moment, the wrapper gets a test clock (see *Testing Retry Logic*): time
 only moves when the page says so.
 */
print("The image is deleted during the wait:")
let vanishing = FakeRenderer(images: ["dog.jpg"], answers: [.failure(.outOfMemory)])
let clock = ManualRetryScheduler()
let doomed = RetryableOperationWrapper(baseOperation: ThumbnailOperation(image: "dog.jpg", renderer: vanishing), retryLimit: .maximum(3))
doomed.retryScheduler = clock
queue.addOperation(doomed)
precondition(clock.waitForScheduledRetries(count: 1, timeout: 10))
vanishing.delete("dog.jpg")
clock.advanceToNextRetry()
queue.waitUntilAllOperationsAreFinished()
print("outcome: \(doomed.outcome!), attempts: \(doomed.numberOfAttempts)")
precondition(doomed.outcome?.error as? RenderError == .imageDeleted)

//: [Next](@next)
