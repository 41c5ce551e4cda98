/*:
 [Previous](@previous)

 # Reporting progress

 Every retrying operation has a Foundation `Progress` (`ProgressReporting`), for a progress
 bar or a system's progress UI:

 - its attempts set its units — `progress` itself, or `reportProgress(completed:of:)`, which
   makes no `Progress` until someone asks for one;
 - a retry continues from where the last attempt left it;
 - success completes it, and cancelling the operation cancels it (and the other way round).

 This page backs up four photos with an async body whose first attempt loses the network
 after two of them; the retry uploads the other two.
 */
import Foundation
import RetryingOperation

/// Where the page's attempts leave a trace: any thread may use it.
final class Trace: @unchecked Sendable {
    // @unchecked: `lines` is only touched while `lock` is held.
    private let lock = NSLock()
    private var lines: [String] = []
    func add(_ line: String) { lock.lock(); lines.append(line); lock.unlock() }
    var all: [String] { lock.lock(); defer { lock.unlock() }; return lines }
}
let trace = Trace()
let photos = ["beach.heic", "dunes.heic", "pier.heic", "sunset.heic"]
struct NetworkLost: Error {}

let clock = ManualRetryScheduler()   // the retry comes due when the page says so
let backup = AsyncRetryingOperation { attempt in
    attempt.progress.totalUnitCount = Int64(photos.count)
    // A retry skips the photos an earlier attempt uploaded.
    for photo in photos.dropFirst(Int(attempt.progress.completedUnitCount)) {
        if attempt.number == 1, attempt.progress.completedUnitCount == 2 { throw NetworkLost() }
        trace.add("uploaded \(photo) in attempt \(attempt.number)")
        attempt.progress.completedUnitCount += 1
    }
}
backup.retryScheduler = clock
//: A parent counts the backup as one of its units: a screen showing the whole sync.
let sync = Progress(totalUnitCount: 1)
sync.addChild(backup.progress, withPendingUnitCount: 1)

backup.start()
await clock.waitForScheduledRetries(count: 1)
print("after the first attempt: \(backup.progress.completedUnitCount) of \(backup.progress.totalUnitCount)")
precondition(backup.progress.fractionCompleted == 0.5)
clock.advance(by: 60)
let backedUp = await backup.finalOutcome
precondition(backedUp.isSuccess)
print("done: \(Int(sync.fractionCompleted * 100)) %")
precondition(sync.fractionCompleted == 1)
precondition(trace.all == [
    "uploaded beach.heic in attempt 1", "uploaded dunes.heic in attempt 1",
    "uploaded pier.heic in attempt 2", "uploaded sunset.heic in attempt 2",
])

/*:
 ## Reporting where nobody may be looking

 `reportProgress(completed:of:)` keeps two numbers; the `Progress` is made from them the first
 time someone asks. A subclass calls it from its attempt:
 */
final class Download: RetryingOperation, @unchecked Sendable {
    override var isAsynchronous: Bool { true }
    override func startBaseOperation(isRetry: Bool) {
        DispatchQueue.global().async {
            for chunk in 1...4 { self.reportProgress(completed: Int64(chunk) * 256, of: 1_024) }
            self.baseOperationEnded()
        }
    }
}
let download = Download()
download.start()
let downloaded = await download.finalOutcome
precondition(downloaded.isSuccess)
precondition(download.progress.completedUnitCount == 1_024 && download.progress.fractionCompleted == 1)

//: Cancelling the progress — a cancel button on a progress UI — cancels the operation.
final class Endless: RetryingOperation, @unchecked Sendable {
    override var isAsynchronous: Bool { true }
    override func cancelBaseOperation() { baseOperationEnded(failingWith: CancellationError()) }
}
let endless = Endless()
endless.start()
endless.progress.cancel()
let ended = await endless.finalOutcome
if case .cancelled = ended {} else { preconditionFailure("not cancelled") }
print("cancelled from its progress")

//: [Next](@next)
