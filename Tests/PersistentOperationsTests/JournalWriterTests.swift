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
    func concurrentDurableAppendsShareFlushes() throws {
        // Given a writer whose flushes take 2 ms
        let segment = try RecordedSegment(flushLatency: 2_000)
        let writer = segment.writer()

        // When 8 threads append 50 frames each, durably
        onThreads(8) { thread in
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
    func aWriterThatDoesNotFlushNeverFlushes() throws {
        // Given a writer made not to flush (survives crashes and kills, not power cuts)
        let segment = try RecordedSegment()
        let writer = segment.writer(flushes: false, flushDelay: 0.001)

        // When frames are appended with either durability, flushed and the writer closed
        try writer.append(Self.frame(1), durability: .flushed)
        try writer.append(Self.frame(2), durability: .written)
        try writer.flush()
        Thread.sleep(forTimeInterval: 0.05)   // past the flush delay: no flush may come
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
    func mixedAppendsAndFlushesFromManyThreadsKeepEveryFrame() throws {
        // Given a writer with a short flush delay
        let segment = try RecordedSegment(flushLatency: 200)
        let writer = segment.writer(flushDelay: 0.001)
        let threads = isRunningUnderThreadSanitizer ? 4 : 8

        // When threads append durable and written frames and ask for flushes at once
        onThreads(threads) { thread in
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
/// all have returned.
private func onThreads(_ count: Int, _ body: @escaping @Sendable (Int) -> Void) {
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

/// A segment file in a temporary directory, and a file system that records the writer's
/// calls (`pwrite <offset> <count>`, `fdatasync`, `ftruncate <length>`) and injects faults.
final class RecordedSegment: Sendable {
    struct Faults: Sendable {
        /// Writes put at most this many more bytes, then fail with ENOSPC.
        var writeFailsAfter: Int?
        /// Flushes fail with EIO.
        var flushFails = false
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
