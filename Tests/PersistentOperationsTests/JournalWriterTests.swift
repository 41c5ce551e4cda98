import Foundation
import Testing
@testable import PersistentOperations

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// The journal's writer: appends in order, flushed before a durable append returns, flushes
/// shared by concurrent appends, written frames flushed soon, failures that leave nothing
/// behind.
@Suite(.timeLimit(.minutes(1)))
struct JournalWriterTests {
    @Test
    func aDurableAppendIsWrittenAndFlushedBeforeItReturns() throws {
        // Given a writer on a file system that records its calls
        let segment = try RecordedSegment()
        let writer = segment.writer()

        // When three frames are appended durably, one after the other
        for index in 0..<3 {
            let offset = try writer.append(Self.frame(index), durability: .flushed)
            // Then each returned after its write and a flush that followed it
            let calls = segment.calls.withLock { $0 }
            #expect(calls.suffix(2) == ["pwrite \(offset) \(Self.frame(index).count)", "fdatasync"])
        }
        // And the segment holds the frames, in order, end to end
        writer.close()
        #expect(try segment.contents() == Self.frame(0) + Self.frame(1) + Self.frame(2))
        #expect(writer.flushCount == 3)
    }

    @Test
    func concurrentDurableAppendsShareFlushes() async throws {
        // Given a writer whose flushes take 2 ms
        let segment = try RecordedSegment(flushLatency: 2_000)
        let writer = segment.writer()

        // When 8 threads append 50 frames each, durably
        await onThreads(8) { thread in
            for index in 0..<50 {
                try! writer.append(Self.frame(thread * 1_000 + index), durability: .flushed)
            }
        }
        writer.close()

        // Then every frame is there once, whole, and far fewer flushes than appends ran
        let frames = try Self.frames(in: segment.contents())
        #expect(frames.count == 400)
        #expect(Set(frames).count == 400)
        #expect(writer.flushCount <= 200)
    }

    @Test
    func aWrittenAppendIsFlushedWithinTheFlushDelay() async throws {
        // Given a writer that flushes written frames within 10 ms
        let segment = try RecordedSegment()
        let writer = segment.writer(flushDelay: 0.01)

        // When a frame is appended without waiting for a flush
        try writer.append(Self.frame(1), durability: .written)
        // Then it returned before any flush, and one follows by itself
        #expect(!segment.calls.withLock { $0 }.contains("fdatasync"))
        #expect(try await eventually { segment.calls.withLock { $0 }.contains("fdatasync") })
        #expect(writer.flushCount == 1)
        writer.close()
    }

    @Test
    func aWrittenAppendIsFlushedWithinTheFlushDelayWhileEveryThreadOfTheGlobalQueueIsHeld() async throws {
        // Given a writer that flushes written frames within 10 ms, and every thread of the
        // global queue held by blocking work elsewhere in the process
        let segment = try RecordedSegment()
        let writer = segment.writer(flushDelay: 0.01)
        let (flushed, queueWasHeld) = await whileTheGlobalQueueIsHeld { () -> Bool in
            // When a frame is appended without waiting for a flush
            guard (try? writer.append(Self.frame(1), durability: .written)) != nil else { return false }
            // Then the flush follows by itself all the same: it needs no thread of that queue
            let deadline = Date().addingTimeInterval(5)
            while !segment.calls.withLock({ $0.contains("fdatasync") }), Date() < deadline { usleep(1_000) }
            return segment.calls.withLock { $0 }.contains("fdatasync")
        }
        #expect(queueWasHeld)
        #expect(flushed)
        #expect(writer.flushCount == 1)
        writer.close()
    }

    @Test
    func writtenAppendsRideAlongWithTheNextDurableOne() throws {
        // Given a writer whose own flush of written frames would come only after a minute
        let segment = try RecordedSegment()
        let writer = segment.writer(flushDelay: 60)

        // When three removals are written, then one frame is appended durably
        for index in 0..<3 { try writer.append(Self.frame(index), durability: .written) }
        try writer.append(Self.frame(3), durability: .flushed)

        // Then one flush covered all four
        #expect(segment.calls.withLock { $0 }.filter { $0 == "fdatasync" }.count == 1)
        #expect(segment.calls.withLock { $0 }.last == "fdatasync")
        writer.close()
        #expect(try Self.frames(in: segment.contents()).count == 4)
    }

    @Test
    func aFailedWriteLeavesNothingOfItsFrame() throws {
        // Given a writer whose file system writes one more byte, then fails with ENOSPC
        let segment = try RecordedSegment()
        let writer = segment.writer()
        try writer.append(Self.frame(1), durability: .flushed)
        segment.faults.withLock { $0.writeFailsAfter = 1 }

        // When a frame is appended, the append throws writeFailed
        #expect(throws: PersistenceError.self) { try writer.append(Self.frame(2), durability: .flushed) }
        #expect((try? writer.append(Self.frame(2), durability: .flushed)).map { _ in true } == nil)

        // Then the segment ends where the frame began, and once the disk has room the writer
        // appends after the first frame
        #expect(try segment.contents() == Self.frame(1))
        segment.faults.withLock { $0.writeFailsAfter = nil }
        try writer.append(Self.frame(3), durability: .flushed)
        writer.close()
        #expect(try segment.contents() == Self.frame(1) + Self.frame(3))
    }

    @Test
    func aFrameWrittenInPiecesIsWholeOrLeavesNothing() throws {
        // Given a writer whose file system, after one frame, writes a frame's first part, its
        // second, and three bytes of its third, then fails with ENOSPC
        let segment = try RecordedSegment()
        let writer = segment.writer()
        try writer.append(Self.frame(1), durability: .flushed)
        let first = Data("head".utf8)
        let rest = [Data(repeating: 0x2A, count: 100), Data(repeating: 0x2B, count: 50)]
        segment.faults.withLock { $0.writeFailsAfter = first.count + 100 + 3 }

        // When the three-piece frame is appended, the append throws
        #expect(throws: PersistenceError.self) { try writer.append(first, then: rest, durability: .flushed) }

        // Then the segment ends where the frame began, and once the disk has room the frame
        // is written whole, its parts end to end, and the next frame after it
        #expect(try segment.contents() == Self.frame(1))
        segment.faults.withLock { $0.writeFailsAfter = nil }
        let offset = try writer.append(first, then: rest, durability: .flushed)
        let next = try writer.append(Self.frame(2), durability: .flushed)
        writer.close()
        #expect(offset == Int64(Self.frame(1).count))
        #expect(next == offset + Int64(first.count + 150))
        #expect(try segment.contents() == Self.frame(1) + first + rest[0] + rest[1] + Self.frame(2))
    }

    @Test
    func aFailedFlushFailsEveryLaterCall() throws {
        // Given a writer whose next flush fails with EIO
        let segment = try RecordedSegment()
        let writer = segment.writer()
        try writer.append(Self.frame(1), durability: .flushed)
        segment.faults.withLock { $0.flushFails = true }

        // When a frame is appended durably, it throws
        var error: PersistenceError?
        do { try writer.append(Self.frame(2), durability: .flushed) } catch let caught as PersistenceError { error = caught }
        #expect(error?.code == .writeFailed)

        // Then later calls throw too, even once flushes work again: what the failed flush
        // covered cannot be trusted
        segment.faults.withLock { $0.flushFails = false }
        #expect(throws: PersistenceError.self) { try writer.append(Self.frame(3), durability: .written) }
        #expect(throws: PersistenceError.self) { try writer.flush() }
        writer.close()
    }

    @Test
    func aWriterThatDoesNotFlushNeverFlushes() async throws {
        // Given a writer made not to flush (survives crashes and kills, not power cuts)
        let segment = try RecordedSegment()
        let writer = segment.writer(flushes: false, flushDelay: 0.001)

        // When frames are appended with either durability, flushed and the writer closed
        try writer.append(Self.frame(1), durability: .flushed)
        try writer.append(Self.frame(2), durability: .written)
        try writer.flush()
        try await Task.sleep(for: .milliseconds(50))   // past the flush delay: no flush may come
        writer.close()

        // Then every frame is written and nothing was flushed
        #expect(try segment.contents() == Self.frame(1) + Self.frame(2))
        #expect(!segment.calls.withLock { $0 }.contains("fdatasync"))
    }

    @Test
    func closingFlushesWhatWasWritten() throws {
        let segment = try RecordedSegment()
        let writer = segment.writer(flushDelay: 60)
        try writer.append(Self.frame(1), durability: .written)
        writer.close()
        #expect(segment.calls.withLock { $0 }.last == "fdatasync")
        #expect(throws: PersistenceError.self) { try writer.append(Self.frame(2), durability: .written) }
    }

    @Test
    func mixedAppendsAndFlushesFromManyThreadsKeepEveryFrame() async throws {
        // Given a writer with a short flush delay
        let segment = try RecordedSegment(flushLatency: 200)
        let writer = segment.writer(flushDelay: 0.001)
        let threads = isRunningUnderThreadSanitizer ? 4 : 8

        // When threads append durable and written frames and ask for flushes at once
        await onThreads(threads) { thread in
            for index in 0..<100 {
                let durability: JournalWriter.Durability = index.isMultiple(of: 3) ? .flushed : .written
                try! writer.append(Self.frame(thread * 1_000 + index), durability: durability)
                if index.isMultiple(of: 10) { try! writer.flush() }
            }
        }
        try writer.flush()
        let flushesBeforeClose = writer.flushCount
        writer.close()

        // Then every frame is there once and whole, and the writer never flushed more often
        // than it was asked to
        let frames = try Self.frames(in: segment.contents())
        #expect(frames.count == threads * 100)
        #expect(Set(frames).count == threads * 100)
        #expect(flushesBeforeClose <= threads * (34 + 10) + 1)
    }

    // MARK: - Support

    /// A frame for the tests: a length byte, then `index` in decimal, padded to vary sizes.
    static func frame(_ index: Int) -> Data {
        let text = String(index) + String(repeating: ".", count: index % 7)
        return Data([UInt8(text.utf8.count)]) + Data(text.utf8)
    }

    /// The frames of `frame(_:)` in `data`, as their text.
    static func frames(in data: Data) throws -> [String] {
        var frames: [String] = []
        var index = data.startIndex
        while index < data.endIndex {
            let length = Int(data[index])
            let body = data.index(after: index)
            try #require(data.distance(from: body, to: data.endIndex) >= length, "a frame is cut short at \(index)")
            frames.append(String(decoding: data[body..<data.index(body, offsetBy: length)], as: UTF8.self))
            index = data.index(body, offsetBy: length)
        }
        return frames
    }
}

/// Runs `body(0)` … `body(count - 1)` on `count` threads of their own, all at once (not
/// `concurrentPerform`, which runs only as many at once as there are cores), and returns when
/// all have returned. The wait, too, holds a thread of its own: not one of the few the tests
/// share.
private func onThreads(_ count: Int, _ body: @escaping @Sendable (Int) -> Void) async {
    await onDedicatedThread {
        let group = DispatchGroup()
        for index in 0..<count {
            group.enter()
            Thread.detachNewThread {
                body(index)
                group.leave()
            }
        }
        group.wait()
    }
}

/// A segment file in a temporary directory, and a file system that records the writer's
/// calls (`pwrite <offset> <count>`, `fdatasync`, `ftruncate <length>`) and injects faults.
extension JournalWriterTests {
    @Test
    func aFlushingWriterAppendsInsideZerosItFilledAheadAndGivesThemBackAtClose() throws {
        // Given a flushing writer
        let segment = try RecordedSegment()
        let writer = segment.writer()

        // When frames are appended durably
        try writer.append(Self.frame(0), durability: .flushed)
        let afterFirst = segment.calls.withLock { $0.count }
        try writer.append(Self.frame(1), durability: .flushed)
        try writer.append(Self.frame(2), durability: .flushed)

        // Then the file was filled with zeros ahead once, and later appends only write their
        // frame and flush: the file's size, and so its metadata, does not change
        let frames = Self.frame(0) + Self.frame(1) + Self.frame(2)
        let filled = try segment.contents()
        #expect(filled.count >= JournalWriter.defaultFillAhead)
        #expect(filled.prefix(frames.count) == frames)
        #expect(filled.dropFirst(frames.count).allSatisfy { $0 == 0 })
        let later = segment.calls.withLock { Array($0.dropFirst(afterFirst)) }
        #expect(later == [
            "pwrite \(Self.frame(0).count) \(Self.frame(1).count)", "fdatasync",
            "pwrite \(Self.frame(0).count + Self.frame(1).count) \(Self.frame(2).count)", "fdatasync",
        ])
        // And a scan reads the zeros as unused space, not damage
        let scan = try JournalSegment.scan(JournalSegment.header(salt: 1, number: 1) + Data(count: 4096))
        #expect(scan.tornTail == nil && scan.corruptRegions.isEmpty && scan.unusedTail?.count == 4096)

        // When the writer closes, the file ends with the last frame
        writer.close()
        #expect(try segment.contents() == frames)
    }

    @Test
    func whenFillingAheadFailsTheFrameIsAppendedToTheEndOfTheFile() throws {
        // Given a writer on a disk with room for frames but not for the zeros filled ahead
        let segment = try RecordedSegment()
        segment.faults.withLock { $0.zeroFillFails = true }
        let writer = segment.writer()

        // When frames are appended durably
        try writer.append(Self.frame(0), durability: .flushed)
        try writer.append(Self.frame(1), durability: .flushed)

        // Then each is written at the end of the file, nothing else is in it
        #expect(try segment.contents() == Self.frame(0) + Self.frame(1))
        writer.close()
        #expect(try segment.contents() == Self.frame(0) + Self.frame(1))
    }

    @Test
    func zerosLeftAfterTheFramesOfAnySegmentOpenAsUnusedSpaceAndAreAppendedOver() throws {
        // Given a store of several segments whose zeros filled ahead were never given back (a
        // crash before a segment was trimmed), in a sealed segment and in the last one
        let directory = try TemporaryDirectory()
        let configuration = JournalStore.Configuration(segmentSize: 4096)
        let records = try (1...12).map { try makeRecord(index: $0) }
        do {
            let store = try JournalStore(directory: directory.store, configuration: configuration)
            for record in records { try store.add(record) }
            store.close()
        }
        let journal = directory.path("journal")
        let names = try FileManager.default.contentsOfDirectory(atPath: journal).compactMap(JournalSegmentName.init(fileName:)).sorted()
        try #require(names.count >= 2)
        for name in [names[0], names[names.count - 1]] {
            let handle = try #require(FileHandle(forWritingAtPath: journal + "/" + name.fileName))
            handle.seekToEndOfFile()
            handle.write(Data(count: 10_000))
            handle.closeFile()
        }

        // When it opens and takes another record
        let extra = try makeRecord(index: 99)
        do {
            let store = try JournalStore(directory: directory.store, configuration: configuration)
            // Then nothing is reported damaged or cut off, and every record is there
            #expect(store.openReport.quarantined.isEmpty)
            #expect(store.openReport.cutOff.isEmpty)
            #expect(store.pendingCount == records.count)
            try store.add(extra)
            store.close()
        }
        // And the record appended over the zeros reads back after another open
        let reopened = try JournalStore(directory: directory.store, configuration: configuration)
        defer { reopened.close() }
        #expect(reopened.openReport.quarantined.isEmpty && reopened.openReport.cutOff.isEmpty)
        #expect(try reopened.readPending(id: extra.id) == extra)
        #expect(reopened.pendingCount == records.count + 1)
    }
}

final class RecordedSegment: Sendable {
    struct Faults: Sendable {
        /// Writes put at most this many more bytes, then fail with ENOSPC.
        var writeFailsAfter: Int?
        /// Flushes fail with EIO.
        var flushFails = false
        /// Writes of zeros (the writer filling ahead) fail with ENOSPC.
        var zeroFillFails = false
    }

    let directory: TemporaryDirectory
    let path: String
    let calls = Locked<[String]>([])
    let faults = Locked(Faults())
    let flushLatency: useconds_t

    init(flushLatency: useconds_t = 0) throws {
        directory = try TemporaryDirectory()
        path = directory.url.appendingPathComponent("segment").path
        self.flushLatency = flushLatency
    }

    var fileSystem: FileSystem {
        let system = FileSystem.system
        var fileSystem = system
        fileSystem.writeAt = { [self] descriptor, bytes, offset in
            var count = bytes.count
            if faults.withLock({ $0.zeroFillFails }), count >= 4096, bytes.allSatisfy({ $0 == 0 }) {
                throw SystemCallError("pwrite", code: ENOSPC)
            }
            if let budget = faults.withLock({ $0.writeFailsAfter }) {
                guard budget > 0 else { throw SystemCallError("pwrite", code: ENOSPC) }
                count = min(count, budget)
                faults.withLock { $0.writeFailsAfter = budget - count }
            }
            let written = try system.writeAt(descriptor, UnsafeRawBufferPointer(rebasing: bytes[..<count]), offset)
            calls.withLock { $0.append("pwrite \(offset) \(written)") }
            return written
        }
        fileSystem.truncate = { [self] descriptor, length in
            calls.withLock { $0.append("ftruncate \(length)") }
            try system.truncate(descriptor, length)
        }
        fileSystem.synchronizeData = { [self] descriptor in
            if flushLatency > 0 { usleep(flushLatency) }
            if faults.withLock({ $0.flushFails }) { throw SystemCallError("fdatasync", code: EIO) }
            try system.synchronizeData(descriptor)
            calls.withLock { $0.append("fdatasync") }
        }
        return fileSystem
    }

    func writer(flushes: Bool = true, flushDelay: TimeInterval = JournalWriter.defaultFlushDelay) -> JournalWriter {
        let descriptor = try! FileSystem.system.open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0o600)
        return JournalWriter(descriptor: descriptor, path: path, end: 0, fileSystem: fileSystem, flushes: flushes, flushDelay: flushDelay)
    }

    func contents() throws -> Data {
        try Data(contentsOf: URL(fileURLWithPath: path))
    }
}
