import Foundation
import Testing
@testable import PersistentOperations

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// An open reads a journal's segments on a thread of its own, ahead of the thread that indexes
/// them, into mapped pages it reuses from one segment to the next.
@Suite("Journal store: segments read ahead while an open indexes them", .timeLimit(.minutes(1)))
struct JournalOpenReaderTests {
    /// A file system that records the segments opened and every descriptor closed, and fails
    /// the read of the segment whose name ends with `failing` (with EIO). The first look at a
    /// segment's size (the indexing thread's, once it has indexed the first segment) takes
    /// 300 ms: a reader that went on after a failure would open the next segment meanwhile.
    private final class Recorder: Sendable {
        let openedSegments = Locked<[(path: String, descriptor: Int32)]>([])
        let closed = Locked<Set<Int32>>([])
        let failingDescriptor = Locked<Int32?>(nil)

        func fileSystem(failing: String?) -> FileSystem {
            var fileSystem = FileSystem.system
            let system = FileSystem.system
            fileSystem.open = { [self] path, flags, mode in
                let descriptor = try system.open(path, flags, mode)
                if path.hasSuffix(".segment") {
                    openedSegments.withLock { $0.append((path, descriptor)) }
                    if let failing, path.hasSuffix(failing) { failingDescriptor.withLock { $0 = descriptor } }
                }
                return descriptor
            }
            fileSystem.read = { [self] descriptor, buffer in
                if failingDescriptor.withLock({ $0 == descriptor }) { throw SystemCallError("read", code: EIO) }
                return try system.read(descriptor, buffer)
            }
            let stalled = Locked(false)
            fileSystem.linkStatus = { path in
                if path.hasSuffix(".segment"), stalled.withLock({ stalled in defer { stalled = true }; return !stalled }) { usleep(300_000) }
                return try system.linkStatus(path)
            }
            fileSystem.close = { [self] descriptor in
                closed.withLock { _ = $0.insert(descriptor) }
                if failingDescriptor.withLock({ $0 == descriptor }) { failingDescriptor.withLock { $0 = nil } }
                try system.close(descriptor)
            }
            return fileSystem
        }
    }

    /// A store of `count` records in segments of 4 KiB (a few records each); its segment
    /// names, in order.
    private func storeWithRecords(_ directory: TemporaryDirectory, count: Int) throws -> ([OperationRecord], [String]) {
        let store = try JournalStore(directory: directory.store, configuration: .init(segmentSize: 4096))
        let records = try (0..<count).map { try makeRecord(index: $0) }
        for record in records { try store.add(record) }
        store.close()
        let journal = StoreLayout(directory: directory.store).root + "/journal"
        // (Without the segments' hints: these tests are about reading segments.)
        for hint in try FileManager.default.contentsOfDirectory(atPath: journal) where hint.hasSuffix(".hint") {
            try FileManager.default.removeItem(atPath: journal + "/" + hint)
        }
        let names = try FileManager.default.contentsOfDirectory(atPath: journal).filter { $0.hasSuffix(".segment") }.sorted()
        return (records, names)
    }

    @Test func aJournalOfManySegmentsOpensWithEveryRecordAsWritten() throws {
        // Given a journal of many segments, some records rewritten and some removed
        let directory = try TemporaryDirectory()
        let (records, names) = try storeWithRecords(directory, count: 60)
        #expect(names.count >= 6)
        do {
            let store = try JournalStore(directory: directory.store, configuration: .init(segmentSize: 4096))
            var rewritten = records[7]
            rewritten.numberOfRetries = 3
            try store.update(rewritten)
            try store.removePending(id: records[40].id)
            store.close()
        }
        // When it is opened again (the segments read ahead, their pages reused)
        let recorder = Recorder()
        let store = try JournalStore(directory: directory.store, configuration: .init(segmentSize: 4096, fileSystem: recorder.fileSystem(failing: nil)))
        defer { store.close() }
        // Then every segment was read, and every record reads as it was last written
        #expect(store.pendingCount == records.count - 1)
        for (index, record) in records.enumerated() where index != 40 {
            var expected = record
            if index == 7 { expected.numberOfRetries = 3 }
            #expect(try store.readPending(id: record.id) == expected)
        }
        #expect(throws: PersistenceError.self) { _ = try store.readPending(id: records[40].id) }
        let opened = recorder.openedSegments.withLock { $0.map { ($0.path as NSString).lastPathComponent } }
        #expect(Set(opened).isSuperset(of: names))
    }

    @Test func aSegmentThatCannotBeReadFailsTheOpenAndNothingAfterItIsOpenedOrLeftOpen() throws {
        // Given a journal of many segments whose second cannot be read
        let directory = try TemporaryDirectory()
        let (_, names) = try storeWithRecords(directory, count: 60)
        #expect(names.count >= 6)
        let recorder = Recorder()
        // When it is opened
        let error = #expect(throws: PersistenceError.self) {
            _ = try JournalStore(directory: directory.store, configuration: .init(segmentSize: 4096, fileSystem: recorder.fileSystem(failing: names[1])))
        }
        // Then the open fails with a read error that names the segment...
        #expect(error?.code == .readFailed)
        #expect(error?.fileURL?.lastPathComponent == names[1])
        // ...no segment after it was opened, and every segment opened was closed
        let opened = recorder.openedSegments.withLock { $0 }
        #expect(opened.map { ($0.path as NSString).lastPathComponent } == Array(names[0...1]))
        let closed = recorder.closed.withLock { $0 }
        for segment in opened { #expect(closed.contains(segment.descriptor), "\(segment.path) left open") }
        // And the journal itself is unharmed: an open without the fault reads it
        let store = try JournalStore(directory: directory.store, configuration: .init(segmentSize: 4096))
        #expect(store.pendingCount == 60)
        store.close()
    }
}
