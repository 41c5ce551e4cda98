import Foundation
import Testing
@testable import PersistentOperations

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// A read-only open takes no lock, so the store's owner may compact while it reads: a segment
/// it listed can be gone when it opens it. It starts over from a new listing.
@Suite("Journal store: a read-only open racing the owner's compaction", .timeLimit(.minutes(1)))
struct ReadOnlyOpenRaceTests {
    /// A file system whose `open` of a journal segment fails with ENOENT while `vanishings`
    /// remain, as if the owner had just removed it.
    private static func fileSystem(vanishings: Int) -> (FileSystem, Locked<Int>) {
        let remaining = Locked(vanishings)
        let opens = Locked(0)
        var fileSystem = FileSystem.system
        let open = fileSystem.open
        fileSystem.open = { path, flags, mode in
            if path.hasSuffix(".segment") {
                opens.withLock { $0 += 1 }
                let vanishes = remaining.withLock { remaining -> Bool in
                    guard remaining > 0 else { return false }
                    remaining -= 1
                    return true
                }
                if vanishes { throw SystemCallError("open", path: path, code: ENOENT) }
            }
            return try open(path, flags, mode)
        }
        return (fileSystem, opens)
    }

    private func storeWithRecords(_ directory: TemporaryDirectory, count: Int) throws -> [OperationRecord] {
        let store = try JournalStore(directory: directory.store, configuration: .init(segmentSize: 4096))
        let records = try (0..<count).map { try makeRecord(index: $0) }
        for record in records { try store.add(record) }
        store.close()
        return records
    }

    @Test func aSegmentThatVanishesOnceMakesTheOpenStartOverAndEveryRecordIsRead() throws {
        let directory = try TemporaryDirectory()
        let records = try storeWithRecords(directory, count: 20)
        // Given a read-only open whose second segment vanishes the first time it is opened
        let (fileSystem, opens) = Self.fileSystem(vanishings: 1)
        let store = try JournalStore(directory: directory.store, configuration: .init(fileSystem: fileSystem, isReadOnly: true))
        defer { store.close() }
        // Then it started over and read every record
        #expect(store.pendingCount == records.count)
        for record in records { #expect(try store.readPending(id: record.id) == record) }
        #expect(opens.withLock { $0 } > 1)
    }

    @Test func segmentsThatKeepVanishingGiveAClearErrorAfterTheAttempts() throws {
        let directory = try TemporaryDirectory()
        _ = try storeWithRecords(directory, count: 3)
        let (fileSystem, opens) = Self.fileSystem(vanishings: .max)
        let error = #expect(throws: PersistenceError.self) {
            _ = try JournalStore(directory: directory.store, configuration: .init(fileSystem: fileSystem, isReadOnly: true))
        }
        #expect(error?.code == .readFailed)
        #expect(error?.message.contains("kept disappearing") == true)
        #expect(opens.withLock { $0 } == JournalStore.readOnlyOpenAttempts)
        // And the store itself is untouched: a normal open reads it
        let store = try JournalStore(directory: directory.store)
        #expect(store.pendingCount == 3)
        store.close()
    }

    @Test func aWritableOpenStillReportsAMissingSegmentAsAReadFailure() throws {
        let directory = try TemporaryDirectory()
        _ = try storeWithRecords(directory, count: 3)
        let (fileSystem, _) = Self.fileSystem(vanishings: 1)
        let error = #expect(throws: PersistenceError.self) {
            _ = try JournalStore(directory: directory.store, configuration: .init(fileSystem: fileSystem))
        }
        #expect(error?.code == .readFailed)
    }

    @Test func readOnlyOpensWhileTheOwnerCompactsAgainAndAgainReadEveryLiveRecord() async throws {
        let directory = try TemporaryDirectory()
        // Given an owner that keeps 50 records and churns others through small segments,
        // compacting after each round
        let owner = try JournalStore(directory: directory.store, configuration: .init(segmentSize: 4096, compactionMinimumSize: 4096))
        let kept = try (0..<50).map { try makeRecord(index: $0) }
        for record in kept { try owner.add(record) }
        let stop = Locked(false)
        let churn = Thread {
            var index = 1_000
            while !stop.withLock({ $0 }) {
                let batch = (0..<20).compactMap { _ in index += 1; return try? makeRecord(index: index) }
                for record in batch { try? owner.add(record) }
                for record in batch { try? owner.removePending(id: record.id) }
                try? owner.compact()
            }
        }
        churn.start()
        defer { stop.withLock { $0 = true } }
        // When read-only opens run meanwhile
        var failures: [String] = []
        for _ in 0..<100 {
            do {
                let reader = try JournalStore(directory: directory.store, configuration: .init(isReadOnly: true))
                // Then each sees every kept record
                for record in kept where (try? reader.readPending(id: record.id)) != record {
                    failures.append("missing \(record.id)")
                }
                reader.close()
            } catch {
                failures.append("\(error)")
            }
        }
        stop.withLock { $0 = true }
        while !churn.isFinished { try await Task.sleep(nanoseconds: 5_000_000) }
        owner.close()
        #expect(failures.isEmpty, "\(failures.prefix(3))")
    }
}
