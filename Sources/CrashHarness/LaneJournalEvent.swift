import Foundation

/// One line of the effects journal that `crash-demo lanes-app` appends to: written with
/// ``line`` and read back with ``init(line:)``, so that the app and the verifier share one
/// vocabulary.
///
///     launch 4242 adds=before-restore
///     restored 7 id=6F1C…
///     ack 12 id=9A0B…
///     cancel 12
///     start 12 attempt=1 retry=false at=1767225600.123456
///     end 12 done
///     requeue 8
///     purge 48
///     finished
package enum LaneJournalEvent: Equatable, Sendable {
    /// How an attempt's body ended, written before it calls `baseOperationEnded`.
    package enum AttemptEnd: String, Sendable {
        /// It succeeded.
        case done
        /// It asked for a retry.
        case retry
        /// It failed for good.
        case fail
        /// It stopped because the app cancelled the message.
        case cancelled
    }

    /// The app started (before it opens the queue); with `addsBeforeRestore` it adds its
    /// messages before `restore()`, otherwise after.
    case launch(pid: Int32, addsBeforeRestore: Bool)
    /// `restore()` brought back the pending message (written before anything restored runs).
    case restored(index: Int, id: String)
    /// `addOperation` returned for the message: it is durable.
    case acknowledged(index: Int, id: String)
    /// The app is about to cancel the message by its identifier.
    case cancelRequested(index: Int)
    /// An attempt of the message started, at `date` (wall clock).
    case started(index: Int, attempt: Int, isRetry: Bool, at: Date)
    /// An attempt of the message ended.
    case ended(index: Int, AttemptEnd)
    /// The app is about to re-queue the failed message that holds its lane.
    case requeueRequested(index: Int)
    /// The app is about to purge the failed message that holds its lane.
    case purgeRequested(index: Int)
    /// Every message finished (or waits behind a lane nobody releases) and the app exits.
    case finished
    /// A line this version does not know.
    case unknown(String)

    /// The journal line, without its newline.
    package var line: String {
        switch self {
        case .launch(let pid, let addsBeforeRestore):
            return "launch \(pid) adds=\(addsBeforeRestore ? "before-restore" : "after-restore")"
        case .restored(let index, let id): return "restored \(index) id=\(id)"
        case .acknowledged(let index, let id): return "ack \(index) id=\(id)"
        case .cancelRequested(let index): return "cancel \(index)"
        case .started(let index, let attempt, let isRetry, let date):
            return "start \(index) attempt=\(attempt) retry=\(isRetry) at=\(String(format: "%.6f", date.timeIntervalSince1970))"
        case .ended(let index, let end): return "end \(index) \(end.rawValue)"
        case .requeueRequested(let index): return "requeue \(index)"
        case .purgeRequested(let index): return "purge \(index)"
        case .finished: return "finished"
        case .unknown(let line): return line
        }
    }

    /// Parses one journal line.
    package init(line: Substring) {
        let words = line.split(separator: " ")
        func value(_ key: String) -> Substring? {
            words.first { $0.hasPrefix(key + "=") }.map { $0.dropFirst(key.count + 1) }
        }
        let number = words.count >= 2 ? Int(words[1]) : nil
        switch (words.first, number) {
        case ("launch", let pid?):
            self = .launch(pid: Int32(pid), addsBeforeRestore: value("adds") == "before-restore")
        case ("restored", let index?) where value("id") != nil:
            self = .restored(index: index, id: String(value("id")!))
        case ("ack", let index?) where value("id") != nil:
            self = .acknowledged(index: index, id: String(value("id")!))
        case ("cancel", let index?):
            self = .cancelRequested(index: index)
        case ("start", let index?):
            guard let attempt = value("attempt").flatMap({ Int($0) }), let seconds = value("at").flatMap({ Double($0) }) else {
                self = .unknown(String(line))
                return
            }
            self = .started(index: index, attempt: attempt, isRetry: value("retry") == "true", at: Date(timeIntervalSince1970: seconds))
        case ("end", let index?) where words.count == 3:
            guard let end = AttemptEnd(rawValue: String(words[2])) else {
                self = .unknown(String(line))
                return
            }
            self = .ended(index: index, end)
        case ("requeue", let index?):
            self = .requeueRequested(index: index)
        case ("purge", let index?):
            self = .purgeRequested(index: index)
        case ("finished", _):
            self = .finished
        default:
            self = .unknown(String(line))
        }
    }

    /// Every line of the journal at `path`, read from the start.
    package static func all(at path: String) throws -> [LaneJournalEvent] {
        try String(contentsOfFile: path, encoding: .utf8).split(separator: "\n").map(LaneJournalEvent.init(line:))
    }
}
