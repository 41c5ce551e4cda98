import Foundation
import PersistentOperations

/// A parsed `store-inspector` command line.
///
///     store-inspector list [--store] DIR [--type T] [--tag T]... [--state S] [--limit N [--after ID]] [--json]
///     store-inspector show [--store] DIR ID [--json]
///     store-inspector export [--store] DIR ID [--output PATH] [--payload] [--json]
///     store-inspector failed [--store] DIR [--type T] [--tag T]... [--json [--payload]]
///     store-inspector retry-failed [--store] DIR (ID | --all) [--wait S] [--json]
///     store-inspector purge [--store] DIR (ID | --all) [--wait S] [--json]
///     store-inspector cancel [--store] DIR (ID | --tag T) [--wait S] [--json]
///     store-inspector requeue-quarantined [--store] DIR (NAME | --all) [--json]
struct InspectorCommand {
    /// What to do.
    enum Action: Equatable {
        /// The pending records `filter` lets through; with `limit`, one page of them, after the
        /// record `after` (which `filter` need not let through).
        case list(limit: Int?, after: String?, filter: RecordFilter)
        case show(id: String)
        /// Write one record to a file of its own: `output`, or a file named after the record
        /// in the current directory; only its payload when `payloadOnly`.
        case export(id: String, output: String?, payloadOnly: Bool)
        /// The failed records `filter` lets through; with `payloads` (JSON only), each with its payload.
        case failed(filter: RecordFilter, payloads: Bool)
        case stats
        case retryFailed(Selection)
        case purge(Selection)
        /// Move quarantined records (by entry name, or every readable one) back to pending.
        case requeueQuarantined(Selection)
        /// Ask the running queue to cancel an operation, or those with a tag.
        case cancel(CancelTarget)
    }

    /// The operations `cancel` applies to.
    enum CancelTarget: Equatable {
        case one(id: String)
        case tagged(String)
    }

    /// The failed records a changing command applies to.
    enum Selection: Equatable {
        case one(id: String)
        case all
    }

    var action: Action
    var store: URL
    var json: Bool
    /// How long a request to a running queue waits for its answer, in seconds.
    var wait: TimeInterval = 10

    static let usage = """
        usage: store-inspector COMMAND [--store] DIR [ID | --all] [--json]
               store-inspector list [--store] DIR [--type T] [--tag T]... [--state S] [--limit N [--after ID]] [--json]
               store-inspector failed [--store] DIR [--type T] [--tag T]... [--json [--payload]]
               store-inspector export [--store] DIR ID [--output PATH] [--payload] [--json]

        Inspects a PersistentOperations store directory. Reading commands open the store
        read-only: they take no lock and never write to it (export writes only its own
        file), so they are safe on a store that a running app holds. Changing commands take
        the store's lock; while a running app holds it, retry-failed, purge and cancel ask
        the app's queue instead, through the store's inbox, and print its answer.

        Reading:
          list              pending records: id, type, priority, retries, attempts, next attempt, tags, unique key,
                            due (when it may next start), repeats (a periodic series' schedule);
                            with --limit N, one page of at most N in run order, after --after ID
                            (the last one of the previous page), in the memory of the page;
                            with filters (below), only the records that match
          show ID           every field of one record, and its payload as a property list
          export ID         write one pending or failed record to a file of its own, in the record
                            format (what a .record file of the earlier layout held): to --output PATH,
                            or ./ID.record; with --payload, only its payload's binary property list
                            (default ./ID.payload.plist). Never overwrites a file, nor writes inside
                            the store directory
          failed            records in the failed area, with the reason each failed; --type and
                            --tag filter them; with --json --payload, each record's JSON ends
                            with its payload, as show --json presents it
          stats             counts per area and per type, periodic series, the next due date,
                            quarantined entries with reasons

        Changing (take the store's lock, or ask the app that holds it):
          retry-failed ID | --all   move failed records back to pending with a fresh retry budget
                                    (a running app runs them at once)
          purge ID | --all          delete failed records for good
          cancel ID | --tag T       cancel a pending operation, or every one tagged T, as the
                                    app's cancelOperation would (its dependents fail with it);
                                    asks the running app only
          requeue-quarantined NAME | --all
                                    move quarantined records (by entry name, as stats lists them)
                                    back to pending, as they were stored: for payloads that did
                                    not decode, once a build that reads them ships; entries that
                                    are not readable records stay (needs the lock: stop the app)
          A request to a running app is durable once written; the app takes it in after its
          restore (Configuration.takesAdministrationRequests, on by default). Without an answer
          within --wait seconds the command fails, and the request stays: the app does it when
          it takes it in (each of these may be done twice: what moved meanwhile is reported).

        Filters (list; failed takes --type and --tag): a record must match every one given.
          --type T          records whose type identifier is T
          --tag T           records carrying the tag T; repeated, records carrying every tag given
          --state S         pending records in the state S, by the STATE list shows:
                              due        may start now: no not-before or next-attempt date still
                                         to come, no pending prerequisite, first in its lane, not
                                         running (queued; run conditions are the app's to judge)
                              scheduled  waits for a not-before or next-attempt date still to
                                         come, and is not blocked (scheduled, waitingToRetry)
                              blocked    waits for a pending prerequisite or for its turn in its
                                         lane, whatever its dates (waitingForPrerequisites,
                                         waitingForLane)
                              in-flight  has attempts in flight (attemptsInFlight above 0): running
                                         while an app holds the store; otherwise interrupted, to
                                         run again at its next restore (and also due, scheduled
                                         or blocked)
                            due, scheduled and blocked never overlap; a running record is in none
          A page of a filtered list holds the next N matching records in run order after the
          --after record, which need not match. Unreadable entries are listed whatever the filters.

        Options:
          --store DIR       the store directory (or give it as the first argument after COMMAND)
          --output PATH     where export writes (default: in the current directory)
          --payload         export writes only the record's payload; failed --json adds each
                            record's payload
          --limit N         list shows at most N records (a page)
          --wait S          how long retry-failed, purge and cancel wait for a running app's
                            answer (default 10 seconds)
          --after ID        list starts after this record (with --limit)
          --json            machine-readable output with stable keys
          --help            show this text

        Exit status: 0 on success, 1 when the store cannot be read or changed (or export cannot
        write its file), 2 for a usage error.
        """

    /// `text` as one word of a shell command line, for the commands the inspector prints: as
    /// it is when no character of it means anything to a shell, otherwise in single quotes.
    ///
    /// ```swift
    /// print(InspectorCommand.shellWord("demo.upload"))   // demo.upload
    /// print(InspectorCommand.shellWord("it's here"))     // 'it'\''s here'
    /// ```
    static func shellWord(_ text: String) -> String {
        let isPlain = { (character: Character) in
            character.isASCII && (character.isLetter || character.isNumber || "-_./:@%+=,".contains(character))
        }
        if !text.isEmpty, text.allSatisfy(isPlain) { return text }
        return "'" + text.replacingOccurrences(of: "'", with: "'\\''") + "'"
    }

    /// A record identifier as stored (uppercase), whatever the case it was typed in; text
    /// that is not an identifier is returned unchanged, for the error that names it.
    static func normalizedIdentifier(_ text: String) -> String {
        PersistentOperationID(text)?.rawValue ?? text
    }

    /// Parses `arguments` (without the program name).
    ///
    /// - Throws: ``InspectorError`` with exit status 2 for a usage error.
    init(arguments: [String]) throws {
        var positionals: [String] = []
        var store: String?
        var json = false
        var all = false
        var output: String?
        var payloadOnly = false
        var limit: Int?
        var after: String?
        var filter = RecordFilter()
        var wait: TimeInterval = 10
        var remaining = arguments[...]
        while let argument = remaining.popFirst() {
            switch argument {
            case "--json": json = true
            case "--all": all = true
            case "--payload": payloadOnly = true
            case "--output":
                guard let value = remaining.popFirst() else { throw InspectorError.usage("--output needs a path") }
                output = value
            case "--limit":
                guard let value = remaining.popFirst(), let count = Int(value), count > 0 else {
                    throw InspectorError.usage("--limit needs a number of records greater than 0")
                }
                limit = count
            case "--after":
                guard let value = remaining.popFirst() else { throw InspectorError.usage("--after needs a record identifier") }
                after = Self.normalizedIdentifier(value)
            case "--type":
                guard let value = remaining.popFirst(), !value.hasPrefix("--") else {
                    throw InspectorError.usage("--type needs a type identifier")
                }
                guard filter.typeIdentifier == nil else {
                    throw InspectorError.usage("--type is given once: a record has one type identifier")
                }
                filter.typeIdentifier = value
            case "--tag":
                guard let value = remaining.popFirst(), !value.hasPrefix("--") else { throw InspectorError.usage("--tag needs a tag") }
                if !filter.tags.contains(value) { filter.tags.append(value) }
            case "--state":
                guard let value = remaining.popFirst() else {
                    throw InspectorError.usage("--state needs a state: \(RecordFilter.State.choices)")
                }
                guard let state = RecordFilter.State(rawValue: value) else {
                    throw InspectorError.usage("unknown state \(value) for --state: use \(RecordFilter.State.choices)")
                }
                guard filter.state == nil else { throw InspectorError.usage("--state is given once: the states do not combine") }
                filter.state = state
            case "--store":
                guard let value = remaining.popFirst() else { throw InspectorError.usage("--store needs a directory") }
                store = value
            case "--wait":
                guard let value = remaining.popFirst(), let seconds = TimeInterval(value), seconds >= 0, seconds.isFinite else {
                    throw InspectorError.usage("--wait needs a number of seconds, 0 or more")
                }
                wait = seconds
            case "--help", "-h": throw InspectorError.help
            case _ where argument.hasPrefix("--"): throw InspectorError.usage("unknown option \(argument)")
            default: positionals.append(argument)
            }
        }
        guard !positionals.isEmpty else { throw InspectorError.usage("no command given") }
        let name = positionals.removeFirst()
        if store == nil, !positionals.isEmpty {
            store = positionals.removeFirst()
        }
        guard let store else { throw InspectorError.usage("no store directory given (--store DIR)") }
        func id() throws -> String {
            guard positionals.count == 1 else { throw InspectorError.usage("\(name) needs one record identifier") }
            return Self.normalizedIdentifier(positionals.removeFirst())
        }
        func selection() throws -> Selection {
            if all {
                guard positionals.isEmpty else { throw InspectorError.usage("\(name) takes either an identifier or --all") }
                return .all
            }
            guard positionals.count == 1 else { throw InspectorError.usage("\(name) needs a record identifier or --all") }
            return .one(id: Self.normalizedIdentifier(positionals.removeFirst()))
        }
        switch name {
        case "list":
            guard after == nil || limit != nil else { throw InspectorError.usage("--after needs --limit") }
            action = .list(limit: limit, after: after, filter: filter)
        case "show": action = .show(id: try id())
        case "export": action = .export(id: try id(), output: output, payloadOnly: payloadOnly)
        case "failed": action = .failed(filter: filter, payloads: payloadOnly)
        case "stats": action = .stats
        case "retry-failed": action = .retryFailed(try selection())
        case "purge": action = .purge(try selection())
        case "cancel":
            if let tag = filter.tags.first {
                guard filter.tags.count == 1, positionals.isEmpty else { throw InspectorError.usage("cancel takes either an identifier or one --tag") }
                filter.tags = []
                action = .cancel(.tagged(tag))
            } else {
                guard positionals.count == 1 else { throw InspectorError.usage("cancel needs a record identifier or --tag T") }
                action = .cancel(.one(id: Self.normalizedIdentifier(positionals.removeFirst())))
            }
        case "requeue-quarantined":
            if all {
                guard positionals.isEmpty else { throw InspectorError.usage("\(name) takes either an entry name or --all") }
                action = .requeueQuarantined(.all)
            } else {
                guard positionals.count == 1 else { throw InspectorError.usage("\(name) needs a quarantine entry name or --all") }
                action = .requeueQuarantined(.one(id: positionals.removeFirst()))
            }
        default: throw InspectorError.usage("unknown command \(name)")
        }
        if name != "list", limit != nil || after != nil {
            throw InspectorError.usage("--limit and --after are options of list")
        }
        if name != "list", filter.state != nil {
            throw InspectorError.usage("--state is an option of list (failed records wait for nothing)")
        }
        if name != "list", name != "failed", filter.typeIdentifier != nil || !filter.tags.isEmpty {
            throw InspectorError.usage("--type and --tag are options of list and failed")
        }
        if !positionals.isEmpty {
            throw InspectorError.usage("unexpected argument \(positionals[0])")
        }
        switch action {
        case .retryFailed, .purge, .requeueQuarantined: break
        default: if all { throw InspectorError.usage("--all applies to retry-failed, purge and requeue-quarantined only") }
        }
        switch action {
        case .export: break
        case .failed:
            if output != nil { throw InspectorError.usage("--output applies to export only") }
            if payloadOnly, !json { throw InspectorError.usage("failed --payload needs --json: the payloads go into the JSON") }
        default:
            if output != nil { throw InspectorError.usage("--output applies to export only") }
            if payloadOnly { throw InspectorError.usage("--payload applies to export, and to failed --json") }
        }
        switch action {
        case .retryFailed, .purge, .cancel: break
        default: if arguments.contains("--wait") { throw InspectorError.usage("--wait applies to retry-failed, purge and cancel only") }
        }
        self.store = URL(fileURLWithPath: store, isDirectory: true)
        self.json = json
        self.wait = wait
    }
}

/// Why the inspector stopped, with its exit status.
struct InspectorError: Error, CustomStringConvertible {
    var description: String
    /// 1: the store could not be read or changed; 2: usage error; 0: help was asked for.
    var exitStatus: Int32

    static func usage(_ message: String) -> InspectorError {
        InspectorError(description: "\(message)\n\n\(InspectorCommand.usage)", exitStatus: 2)
    }

    static let help = InspectorError(description: InspectorCommand.usage, exitStatus: 0)

    static func failure(_ message: String) -> InspectorError {
        InspectorError(description: message, exitStatus: 1)
    }
}
