import Foundation

/// One line of the effects journal that `crash-demo app` appends to, parsed.
package enum JournalEvent: Equatable {
    /// The app started: `launch PID restored=N quarantined=Q failed-after-crashes=F`.
    case launch(pid: Int32, restored: Int, quarantined: Int, failedAfterCrashes: Int)
    /// A pending upload was restored from the store: `restored I id=ID`.
    case restored(index: Int, id: String)
    /// The app is about to add an upload (before the call, so a kill during the add leaves
    /// it journaled): `add I after=P,Q batch=B`. `after` lists the indices of its
    /// prerequisites (empty when none); `batch` names the `addOperations` batch it is added in
    /// (absent for a single `addOperation`). Every member of a batch gets its line before the
    /// batch's one call.
    case adding(index: Int, prerequisites: [Int], batch: String?)
    /// `addOperation` (or the `addOperations` of its batch) returned for an upload, so it is
    /// durable: `ack I id=ID after=P,Q` (`after` as in its `add` line, absent when none).
    case acknowledged(index: Int, id: String, prerequisites: [Int])
    /// The app did not add an upload because a prerequisite had failed for good (or was not
    /// added itself): `skip I after=P`.
    case skipped(index: Int, prerequisites: [Int])
    /// The graph nodes in the failed area once `restore()` has returned, written after every
    /// `restored` line of the launch and before any operation may run: `failed-area I,J` (or
    /// `failed-area` alone). Only graph nodes (``AlbumGraph``) are listed.
    case failedArea(indices: [Int])
    /// An attempt started: `start I attempt=A retries=R retry=B pid=P`.
    case started(index: Int, attempt: Int, retries: Int)
    /// An attempt ended asking for a retry: `retry I counted|uncounted`.
    case retry(index: Int, counted: Bool)
    /// An upload completed: `done I`.
    case done(index: Int)
    /// An upload failed for good: `fail I`.
    case failed(index: Int)
    /// The queue removed a completed upload's record: `removed ID`.
    case removed(id: String)
    /// The queue moved a record to the failed area: `moved-to-failed ID`.
    case movedToFailed(id: String)
    /// The queue ended an upload without running it because its prerequisite failed for
    /// good: `abandoned ID prerequisite=ID`.
    case abandoned(id: String, prerequisite: String)
    /// Every operation finished and the app exits: `finished`.
    case finished
    /// The app handles SIGTERM from here on: `signals PID`.
    case handlesSignals(pid: Int32)
    /// SIGTERM arrived; the app shuts down: `sigterm PID`.
    case terminating(pid: Int32)
    /// The shutdown ended and the app exits 0: `shutdown ended=E stopped=S still-running=R seconds=T`.
    case shutDown(stopped: Int, stillRunning: Int)
    /// A line this version does not know.
    case unknown(String)

    /// Parses one journal line.
    package init(line: Substring) {
        let words = line.split(separator: " ")
        func index() -> Int? { words.count >= 2 ? Int(words[1]) : nil }
        func value(_ key: String) -> Substring? {
            words.first { $0.hasPrefix(key + "=") }.map { $0.dropFirst(key.count + 1) }
        }
        func number(_ key: String) -> Int? { value(key).flatMap { Int($0) } }
        func numbers(_ text: Substring?) -> [Int] {
            (text ?? "").split(separator: ",").compactMap { Int($0) }
        }
        switch (words.first, index()) {
        case ("launch", _):
            let pid = words.count >= 2 ? Int32(words[1]) ?? 0 : 0
            self = .launch(pid: pid, restored: number("restored") ?? 0, quarantined: number("quarantined") ?? 0,
                           failedAfterCrashes: number("failed-after-crashes") ?? 0)
        case ("restored", let index?) where value("id") != nil:
            self = .restored(index: index, id: String(value("id")!))
        case ("add", let index?):
            self = .adding(index: index, prerequisites: numbers(value("after")), batch: value("batch").map(String.init))
        case ("ack", let index?) where value("id") != nil:
            self = .acknowledged(index: index, id: String(value("id")!), prerequisites: numbers(value("after")))
        case ("skip", let index?):
            self = .skipped(index: index, prerequisites: numbers(value("after")))
        case ("failed-area", _):
            self = .failedArea(indices: numbers(words.count >= 2 ? words[1] : nil))
        case ("start", let index?):
            self = .started(index: index, attempt: number("attempt") ?? 0, retries: number("retries") ?? 0)
        case ("retry", let index?) where words.count >= 3:
            self = .retry(index: index, counted: words[2] == "counted")
        case ("done", let index?):
            self = .done(index: index)
        case ("fail", let index?):
            self = .failed(index: index)
        case ("removed", _) where words.count == 2:
            self = .removed(id: String(words[1]))
        case ("moved-to-failed", _) where words.count == 2:
            self = .movedToFailed(id: String(words[1]))
        case ("abandoned", _) where words.count == 3 && value("prerequisite") != nil:
            self = .abandoned(id: String(words[1]), prerequisite: String(value("prerequisite")!))
        case ("finished", _):
            self = .finished
        case ("signals", _) where words.count == 2:
            self = .handlesSignals(pid: Int32(words[1]) ?? 0)
        case ("sigterm", _) where words.count == 2:
            self = .terminating(pid: Int32(words[1]) ?? 0)
        case ("shutdown", _) where number("stopped") != nil:
            self = .shutDown(stopped: number("stopped") ?? 0, stillRunning: number("still-running") ?? 0)
        default:
            self = .unknown(String(line))
        }
    }
}

/// Reads an effects journal that another process is appending to, one complete line at a time.
package final class JournalTail {
    private let path: String
    private var handle: FileHandle?
    private var partialLine = Data()

    /// Follows the journal at `path`, which may not exist yet.
    package init(path: String) {
        self.path = path
    }

    deinit {
        try? handle?.close()
    }

    /// The lines completed since the last call.
    package func newEvents() -> [JournalEvent] {
        if handle == nil {
            handle = FileHandle(forReadingAtPath: path)
        }
        guard let handle else { return [] }
        // For a regular file, everything up to its current end.
        let data = handle.availableData
        guard !data.isEmpty else { return [] }
        partialLine.append(data)
        guard let lastNewline = partialLine.lastIndex(of: UInt8(ascii: "\n")) else { return [] }
        let complete = partialLine[partialLine.startIndex...lastNewline]
        partialLine = Data(partialLine[(lastNewline + 1)...])
        return String(decoding: complete, as: UTF8.self).split(separator: "\n").map(JournalEvent.init(line:))
    }

    /// Every line of the journal at `path`, read from the start.
    package static func allEvents(at path: String) throws -> [JournalEvent] {
        try String(contentsOfFile: path, encoding: .utf8).split(separator: "\n").map(JournalEvent.init(line:))
    }
}
