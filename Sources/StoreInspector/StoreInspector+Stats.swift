import Foundation
import PersistentOperations

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// The `stats` command.
extension StoreInspector {
    /// Prints counts per area and per type identifier (no registry needed), the quarantined
    /// entries with their reasons, attempts in flight, the periodic series among the pending
    /// records, the adds other processes left in the store's inbox (`PersistentOperationInbox`
    /// letters waiting for the app's queue, and those it set aside), when the next pending
    /// record is due (``ReadOnlyPersistentStore/nextDueDate(now:)``:
    /// by the records' dates alone), and which process the lock file names.
    ///
    ///     pending       14   demo.upload 13, demo.refresh 1
    ///       running      2   -
    ///       periodic     1   demo.refresh 1
    ///     failed         3   demo.upload 3
    ///     quarantined    1
    ///     inbox          2   waiting for the app's queue
    ///       rejected     0   -
    ///       0F3A….record: The record file is corrupt (checksum mismatch); it cannot be read.
    ///     next due: now
    func stats() throws {
        let reader = try readOnlyStore()
        let now = Date()
        // One reading of the store; a journal store's counts come from its index, with no record
        // decoded (a million records in the time it takes to read the journal, in the memory of
        // its index).
        let summary = try reader.summary(now: now)
        let counts = summary.counts, nextDue = summary.nextDueDate
        let (pendingUnreadable, failedUnreadable) = (summary.pendingUnreadable, summary.failedUnreadable)
        let quarantined = try reader.quarantinedEntries()
        let holder = reader.lockHolder
        let inbox = StoreInbox(directory: store)
        let (lettersWaiting, lettersRejected) = (inbox.letterNames().count, inbox.rejectedLetterNames())
        let unreadable = Self.json(pendingUnreadable, area: "pending") + Self.json(failedUnreadable, area: "failed")
        if json {
            print(JSONValue.object([
                ("store", .string(store.path)),
                ("pending", .integer(Int64(counts.pending))),
                ("pendingByType", Self.countsByType(counts.pendingByType)),
                ("running", .integer(Int64(counts.running))),
                ("failed", .integer(Int64(counts.failed))),
                ("failedByType", Self.countsByType(counts.failedByType)),
                ("quarantined", .integer(Int64(quarantined.count))),
                ("quarantinedEntries", .array(quarantined.map { .object([("name", .string($0.name)), ("reason", .string($0.reason))]) })),
                ("unreadable", .array(unreadable)),
                ("attemptsInFlight", .integer(Int64(counts.running))),
                ("lockFileProcess", holder.map { .integer(Int64($0.processIdentifier)) } ?? .null),
                ("lockFileProcessIsRunning", holder.map { .bool($0.isRunning) } ?? .null),
                ("periodic", .integer(Int64(counts.periodic))),
                ("periodicByType", Self.countsByType(counts.periodicByType)),
                ("inboxWaiting", .integer(Int64(lettersWaiting))),
                ("inboxRejected", .array(lettersRejected.map { .string($0) })),
                ("nextDueDate", RecordPresentation.json(nextDue)),
            ]).rendered(pretty: true))
            return
        }
        print("store \(store.path)")
        var table = TextTable(headers: ["AREA", "COUNT", "BY TYPE"])
        table.append(["pending", "\(counts.pending)", Self.byTypeText(counts.pendingByType)])
        table.append(["  running", "\(counts.running)", "-"])
        table.append(["  periodic", "\(counts.periodic)", Self.byTypeText(counts.periodicByType)])
        table.append(["failed", "\(counts.failed)", Self.byTypeText(counts.failedByType)])
        table.append(["quarantined", "\(quarantined.count)", "-"])
        table.append(["unreadable", "\(unreadable.count)", "-"])
        table.append(["inbox", "\(lettersWaiting)", "waiting for the app's queue"])
        table.append(["  rejected", "\(lettersRejected.count)", lettersRejected.isEmpty ? "-" : lettersRejected.map { $0 + ".rejected" }.joined(separator: ", ")])
        print(table.rendered())
        if !quarantined.isEmpty {
            print("quarantined entries:")
            for entry in quarantined { print("  \(entry.name): \(entry.reason ?? "(no reason recorded)")") }
        }
        printUnreadable(pendingUnreadable, area: "pending")
        printUnreadable(failedUnreadable, area: "failed")
        // By the pending records' dates alone: prerequisites and run conditions are the app's to judge.
        print("next due: \(nextDue.map { $0 <= now ? "now" : RecordPresentation.text($0) } ?? "- (no pending records)")")
        if let holder {
            print("store.lock names process \(holder.processIdentifier), which is \(holder.isRunning ? "running (an app may hold the store)" : "not running")")
        }
    }

    /// Counts per type identifier, sorted by identifier.
    static func countsByType(_ counts: [String: Int]) -> JSONValue {
        .object(counts.sorted { $0.key < $1.key }.map { ($0.key, .integer(Int64($0.value))) })
    }

    static func byTypeText(_ counts: [String: Int]) -> String {
        counts.isEmpty ? "-" : counts.sorted { $0.key < $1.key }.map { "\($0.key) \($0.value)" }.joined(separator: ", ")
    }
}
