/*:
 [Previous](@previous)

 # Background runs and periodic work

 In the background, the system grants an app a window of time and takes it back whenever it
 likes. A *bounded run* fits a `PersistentOperationQueue` to such a window: it resumes the
 queue, runs the due work until a deadline, a `stop()` or until nothing more can start, and
 suspends the queue again. A *periodic operation* is one stored record that runs again every
 interval. Both read the queue's clock, so this page moves a test clock instead of waiting.
 */
import Foundation
import PersistentOperations

/// Where attempts leave a trace for the page to read: any thread may use it.
final class Trace: @unchecked Sendable {
    // @unchecked: `lines` is only touched while `lock` is held.
    private let lock = NSLock()
    private var lines: [String] = []
    func add(_ line: String) { lock.lock(); lines.append(line); lock.unlock() }
    var all: [String] { lock.lock(); defer { lock.unlock() }; return lines }
}
let trace = Trace()

struct Photo: Codable, Sendable {
    var name: String
    var slowAtFirst = false
}

/// An upload; a slow one's first attempt never calls back, as on a bad network.
final class UploadPhoto: RetryingOperation, PersistentOperation, @unchecked Sendable {
    // @unchecked: `payload` is immutable; the rest belongs to RetryingOperation.
    static let persistenceIdentifier = "playground.upload-photo"
    let payload: Photo

    init(payload: Photo) {
        self.payload = payload
        super.init()
    }

    override var isAsynchronous: Bool { true }

    override func startBaseOperation(isRetry: Bool) {
        trace.add("upload \(payload.name) isRetry=\(isRetry)")
        if payload.slowAtFirst && !isRetry { return }   // hangs until stopped
        DispatchQueue.global().async { self.baseOperationEnded() }
    }

    // A bounded run that ends stops the attempt in flight through this hook.
    override func abandonBaseOperation(_ reason: AbandonReason) {
        trace.add("\(payload.name) abandoned: \(reason)")
        super.abandonBaseOperation(reason)   // calls cancelBaseOperation()
    }
}

struct Feed: Codable, Sendable { var name: String }

/// A refresh that runs every period.
final class RefreshFeed: RetryingOperation, PersistentOperation, @unchecked Sendable {
    static let persistenceIdentifier = "playground.refresh-feed"
    let payload: Feed
    init(payload: Feed) { self.payload = payload; super.init() }
    override var isAsynchronous: Bool { false }
    override func startBaseOperation(isRetry: Bool) {
        trace.add("refresh \(payload.name) isRetry=\(isRetry)")
        baseOperationEnded()
    }
}

/// Waits (briefly, for the page) until `condition` holds, firing the clock's timers that fall
/// due meanwhile (a timer may be set just after the clock moved).
func waitUntil(_ clock: ManualRetryScheduler, _ condition: () -> Bool) {
    let deadline = Date().addingTimeInterval(10)
    while !condition() && Date() < deadline {
        clock.advance(by: 0)
        usleep(1_000)
    }
    precondition(condition(), "timed out")
}

let clock = ManualRetryScheduler()
let start = clock.now
/// A date as seconds after the page started, on the test clock.
func at(_ date: Date?) -> String {
    date.map { "t+\(Int($0.timeIntervalSince(start).rounded())) s" } ?? "never"
}

let storeURL = FileManager.default.temporaryDirectory.appendingPathComponent("playground-background-\(UUID().uuidString)")
// Launched in the background: the queue opens suspended, so nothing runs outside a run.
let suspended = OperationQueue()
suspended.isSuspended = true
let queue = try PersistentOperationQueue(
    directory: storeURL, operationQueue: suspended,
    configuration: PersistentOperationQueue.Configuration(scheduler: clock)
)
queue.register(UploadPhoto.self)
queue.register(RefreshFeed.self)
// A period that ends sends `periodEnded` (not `succeeded` or `failed`), once its record is saved.
queue.eventHandler = { event in
    if case .periodEnded(_, let failure, let nextPeriodAt) = event {
        trace.add("period ended (\(failure ?? "succeeded")); the next may start at \(at(nextPeriodAt))")
    }
}
/// The periods that have ended so far.
func periodsEnded() -> Int { trace.all.filter { $0.hasPrefix("period ended") }.count }
try queue.restore()

//: ## A run drains the due work, then suspends the queue
try queue.addOperation(UploadPhoto(payload: Photo(name: "beach.heic")))
try queue.addOperation(UploadPhoto(payload: Photo(name: "hike.heic")))
try queue.addOperation(UploadPhoto(payload: Photo(name: "later.heic")),
                       options: EnqueueOptions(notBefore: start.addingTimeInterval(3600)))
let first = queue.startBoundedRun(until: clock.now.addingTimeInterval(30)).waitUntilFinished()
print("run 1:", first.ending, "-", first.succeeded.count, "succeeded; next due", at(first.nextDueDate))
precondition(first.ending == .drained && first.succeeded.count == 2)
precondition(first.nextDueDate == start.addingTimeInterval(3600))   // later.heic: ask the system for a run then
precondition(queue.isSuspended)

//: ## The deadline stops the attempt in flight: an uncounted retry, saved, that runs again later
let slow = UploadPhoto(payload: Photo(name: "video.mov", slowAtFirst: true))
try queue.addOperation(slow)
let slowID = queue.identifier(of: slow)!
let second = queue.startBoundedRun(until: clock.now.addingTimeInterval(30))
waitUntil(clock) { trace.all.contains("upload video.mov isRetry=false") }
clock.advance(by: 30)                                  // the deadline passes mid-attempt
let secondReport = second.waitUntilFinished()
let stopped = queue.operation(withID: slowID)!
print("run 2:", secondReport.ending, "- stopped", secondReport.stopped.count, "attempt; retries spent:", stopped.numberOfRetries)
precondition(secondReport.ending == .deadlineReached && secondReport.stopped == [slowID])
precondition(trace.all.contains("video.mov abandoned: stopped") && stopped.numberOfRetries == 0)
precondition(queue.isSuspended)

// Back in the foreground: resume the queue; the upload runs again, told it is a retry.
queue.isSuspended = false
waitUntil(clock) { slow.isFinished }
print("foreground:", trace.all.filter { $0.hasPrefix("upload video.mov") })
precondition(slow.outcome?.isSuccess == true && trace.all.contains("upload video.mov isRetry=true"))

//: ## A periodic operation keeps its grid and opens a window before each target
let seriesStart = clock.now
let series = try queue.addOperation(RefreshFeed(payload: Feed(name: "news")),
                                    options: EnqueueOptions(uniqueKey: "news", repeating: .every(3600, flex: 600))).id
waitUntil(clock) { periodsEnded() == 1 }   // the first period runs at once
var info = queue.operation(withID: series)!
precondition(info.completedPeriods == 1 && info.state == .scheduled)
print("period 1 done; next target", at(info.periodTarget), "- its window opens", at(info.notBefore))
precondition(info.periodTarget == seriesStart.addingTimeInterval(3600) && info.notBefore == seriesStart.addingTimeInterval(3000))
precondition(queue.nextDueDate == info.notBefore)

// In the background again; the system grants a run as the window opens.
queue.isSuspended = true
clock.advance(by: 3000)
let third = queue.startBoundedRun(until: clock.now.addingTimeInterval(30))
waitUntil(clock) { third.isFinished }
let thirdReport = third.waitUntilFinished()
info = queue.operation(withID: series)!
print("run 3:", thirdReport.ending, "-", thirdReport.periodsEnded.count, "period; next target", at(info.periodTarget), "(from the last target, not from when it ran)")
precondition(thirdReport.ending == .drained && thirdReport.periodsEnded == [series])
precondition(info.periodTarget == seriesStart.addingTimeInterval(7200))

//: ## After a long absence the missed periods run once, and the grid stays
clock.advance(by: 9.5 * 3600)                // nine and a half hours without a run
queue.isSuspended = false                   // the app is opened
waitUntil(clock) { periodsEnded() == 3 }
info = queue.operation(withID: series)!
let refreshes = trace.all.filter { $0.hasPrefix("refresh news") }
print("back after 9.5 hours:", refreshes.count, "refreshes in all; next target", at(info.periodTarget))
precondition(refreshes == Array(repeating: "refresh news isRetry=false", count: 3))
precondition(info.periodTarget == seriesStart.addingTimeInterval(11 * 3600))

queue.cancelOperation(withID: series)        // cancelling ends the series
queue.waitUntilAllOperationsAreFinished()
waitUntil(clock) { (try? queue.counts().pending) == 0 }   // later.heic ran too, when the app was opened
precondition(trace.all.contains("upload later.heic isRetry=false"))
queue.close()
try? FileManager.default.removeItem(at: storeURL)
print("done")
