import Foundation
import Testing
@testable import PersistentOperations

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// The power-loss simulator itself: what survives a cut, and that its calls behave as POSIX.
@Suite("Power-loss file system", .timeLimit(.minutes(1)))
struct PowerLossFileSystemTests {
    let disk = PowerLossFileSystem()
    var fileSystem: FileSystem { disk.fileSystem }
    let payload = (0..<100).map { UInt8($0) }

    /// Creates `/d` (durably) and returns the descriptor of a new file `/d/<name>`, its
    /// directory entry synced too.
    func durableEmptyFile(_ name: String = "f") throws -> Int32 {
        if (try? fileSystem.linkStatus("/d")) == nil {
            try fileSystem.makeDirectory("/d", 0o700)
            try fileSystem.synchronizeDirectory("/")
        }
        let descriptor = try fileSystem.open("/d/" + name, O_CREAT | O_WRONLY, 0o600)
        try fileSystem.synchronizeDirectory("/d")
        return descriptor
    }

    func write(_ bytes: [UInt8], to descriptor: Int32) throws {
        let count = try bytes.withUnsafeBytes { try fileSystem.write(descriptor, $0) }
        #expect(count == bytes.count)
    }

    /// The snapshot after a cut with each of `seeds`.
    func outcomes(_ seeds: Range<UInt64> = 0..<200) -> [[String: [UInt8]?]] {
        seeds.map { disk.cut(seed: $0).snapshot() }
    }

    @Test func aSynchronizedWriteAlwaysSurvives() throws {
        // Given a write followed by fsync, in a file whose name is durable
        let descriptor = try durableEmptyFile()
        try write(payload, to: descriptor)
        try fileSystem.synchronize(descriptor)
        // When the power is cut, whatever the seed, Then the file holds the write
        for outcome in outcomes() {
            #expect(outcome["/d/f"] == .some(payload))
        }
    }

    @Test func anUnsynchronizedWriteIsLostKeptWholeCutShortOrTorn() throws {
        // Given a write without fsync
        let descriptor = try durableEmptyFile()
        try write(payload, to: descriptor)
        // When the power is cut with many seeds
        var seen: Set<String> = []
        for outcome in outcomes() {
            let data = try #require(outcome["/d/f"] ?? nil, "the file's name was durable")
            switch data {
            case []: seen.insert("lost")
            case payload: seen.insert("whole")
            case _ where data.count < payload.count && payload.starts(with: data): seen.insert("prefix")
            case _ where data.count == payload.count: seen.insert("torn")
            default: Issue.record("unexpected contents \(data)")
            }
        }
        // Then every fate occurs
        #expect(seen == ["lost", "whole", "prefix", "torn"])
    }

    @Test func anUnsynchronizedRenameMayOrMayNotSurviveButNeverLosesTheFile() throws {
        // Given a durable file renamed without a directory sync
        let descriptor = try durableEmptyFile("a")
        try write(payload, to: descriptor)
        try fileSystem.synchronize(descriptor)
        try fileSystem.rename("/d/a", "/d/b")
        // When the power is cut, Then the file is under one name or the other, with its data
        var names: Set<String> = []
        for outcome in outcomes() {
            let present = ["/d/a", "/d/b"].filter { outcome[$0] != nil }
            #expect(present.count == 1)
            #expect(present.allSatisfy { outcome[$0] == .some(payload) })
            names.formUnion(present)
        }
        #expect(names == ["/d/a", "/d/b"])
    }

    @Test func aSynchronizedDirectoryKeepsItsRename() throws {
        let descriptor = try durableEmptyFile("a")
        try fileSystem.close(descriptor)
        try fileSystem.rename("/d/a", "/d/b")
        try fileSystem.synchronizeDirectory("/d")
        for outcome in outcomes() {
            #expect(outcome["/d/a"] == nil && outcome["/d/b"] != nil)
        }
    }

    @Test func aDurableNameDoesNotMakeItsFileDataDurable() throws {
        // Given a file created, written without fsync, renamed, and its directory synced
        try fileSystem.makeDirectory("/d", 0o700)
        try fileSystem.synchronizeDirectory("/")
        let descriptor = try fileSystem.open("/d/.tmp", O_CREAT | O_EXCL | O_WRONLY, 0o600)
        try write(payload, to: descriptor)
        try fileSystem.rename("/d/.tmp", "/d/record")
        try fileSystem.synchronizeDirectory("/d")
        // When the power is cut, Then the name is always there, its data not always
        var contents: Set<[UInt8]> = []
        for outcome in outcomes() {
            contents.insert(try #require(outcome["/d/record"] ?? nil))
            #expect(outcome["/d/.tmp"] == nil)
        }
        #expect(contents.contains(payload) && contents.contains([]))
    }

    @Test func directoriesLoseTheirChangesIndependently() throws {
        // Given two durable directories, each with a new unsynced file
        for directory in ["/a", "/b"] { try fileSystem.makeDirectory(directory, 0o700) }
        try fileSystem.synchronizeDirectory("/")
        for path in ["/a/x", "/b/y"] { try fileSystem.close(try fileSystem.open(path, O_CREAT | O_WRONLY, 0o600)) }
        // When the power is cut, Then every combination occurs: the later change without the earlier too
        let combinations = Set(outcomes().map { [$0["/a/x"] != nil, $0["/b/y"] != nil] })
        #expect(combinations == [[false, false], [false, true], [true, false], [true, true]])
    }

    @Test func aRenameBetweenDirectoriesIsKeptOrLostWholeAndSyncingItsSourceKeepsIt() throws {
        // Given a durable file moved to another directory without a sync
        let descriptor = try durableEmptyFile("r")
        try write(payload, to: descriptor)
        try fileSystem.synchronize(descriptor)
        try fileSystem.makeDirectory("/e", 0o700)
        try fileSystem.synchronizeDirectory("/")
        try fileSystem.rename("/d/r", "/e/r")
        // When the power is cut, Then it is in exactly one of them
        var places: Set<String> = []
        for outcome in outcomes() {
            let present = ["/d/r", "/e/r"].filter { outcome[$0] != nil }
            #expect(present.count == 1)
            places.formUnion(present)
        }
        #expect(places.count == 2)
        // And once the source directory is synced, the move survives every cut
        try fileSystem.synchronizeDirectory("/d")
        for outcome in outcomes(0..<50) {
            #expect(outcome["/d/r"] == nil && outcome["/e/r"] == .some(payload))
        }
    }

    @Test func aSplitRenameBetweenDirectoriesCanLeaveTheFileInBothOrNeither() throws {
        // Given a file system that splits renames between directories, and a durable file moved
        let disk = PowerLossFileSystem(splitsRenamesBetweenDirectories: true)
        let fileSystem = disk.fileSystem
        for directory in ["/d", "/e"] { try fileSystem.makeDirectory(directory, 0o700) }
        try fileSystem.synchronizeDirectory("/")
        try fileSystem.close(try fileSystem.open("/d/r", O_CREAT | O_WRONLY, 0o600))
        try fileSystem.synchronizeDirectory("/d")
        try fileSystem.rename("/d/r", "/e/r")
        // When the power is cut, Then every combination of the two halves occurs
        let combinations = Set((0..<200 as Range<UInt64>).map { disk.cut(seed: $0).snapshot() }.map { [$0["/d/r"] != nil, $0["/e/r"] != nil] })
        #expect(combinations == [[false, false], [false, true], [true, false], [true, true]])
        // And syncing the destination keeps the arrival only
        try fileSystem.synchronizeDirectory("/e")
        #expect(Set((0..<50 as Range<UInt64>).map { disk.cut(seed: $0).snapshot()["/e/r"] != nil }) == [true])
    }

    @Test func theSameSeedGivesTheSameCut() throws {
        // Given pending changes of every kind
        let descriptor = try durableEmptyFile()
        try write(payload, to: descriptor)
        try fileSystem.rename("/d/f", "/d/g")
        try fileSystem.close(try fileSystem.open("/d/h", O_CREAT | O_WRONLY, 0o600))
        #expect(disk.pendingChangeCount.data == 1 && disk.pendingChangeCount.entries == 2)
        // When cut twice with each seed, Then the results agree; different seeds differ somewhere
        for seed in 0..<20 as Range<UInt64> {
            #expect(disk.cut(seed: seed).snapshot() == disk.cut(seed: seed).snapshot())
        }
        #expect(Set(outcomes(0..<20).map { "\($0.sorted { $0.key < $1.key })" }).count > 1)
        // And the live state is untouched by cuts
        #expect(disk.snapshot()["/d/g"] == .some(payload))
    }

    @Test func anArmedCutSeesTheCallsBeforeItOnly() throws {
        // Given cuts armed before the 3rd and the 5th call
        disk.armCut(beforeCall: 3, seed: 1)
        disk.armCut(beforeCall: 5, seed: 1)
        // When calls 1 to 5 run: mkdir, sync, mkdir, sync, mkdir
        for directory in ["/a", "/b", "/c"] {
            try fileSystem.makeDirectory(directory, 0o700)
            if directory != "/c" { try fileSystem.synchronizeDirectory("/") }
        }
        // Then each cut holds the durable directories made before it
        let cuts = disk.cuts
        #expect(cuts.map(\.call) == [3, 5])
        #expect(Set(cuts[0].fileSystem.snapshot().keys) == ["/", "/a"])
        #expect(Set(cuts[1].fileSystem.snapshot().keys) == ["/", "/a", "/b"])
    }

    @Test func callsFailAndSucceedAsPOSIXSays() throws {
        func code(_ body: () throws -> Void) -> Int32? {
            do { try body() } catch let error as SystemCallError { return error.code } catch { return -1 }
            return nil
        }
        try fileSystem.makeDirectory("/d", 0o700)
        #expect(code { _ = try fileSystem.open("/d/missing", O_RDONLY, 0) } == ENOENT)
        #expect(code { _ = try fileSystem.open("/nowhere/f", O_CREAT | O_WRONLY, 0o600) } == ENOENT)
        #expect(code { try fileSystem.makeDirectory("/d", 0o700) } == EEXIST)
        #expect(code { try fileSystem.unlink("/d/missing") } == ENOENT)
        #expect(code { try fileSystem.unlink("/d") } == EISDIR)
        #expect(code { _ = try fileSystem.linkStatus("/d/missing") } == ENOENT)
        // O_EXCL, O_APPEND, O_TRUNC, reads, hard links, permissions and listings
        let first = try fileSystem.open("/d/f", O_CREAT | O_EXCL | O_WRONLY, 0o644)
        #expect(code { _ = try fileSystem.open("/d/f", O_CREAT | O_EXCL | O_WRONLY, 0o600) } == EEXIST)
        try write([1, 2, 3], to: first)
        try fileSystem.setPermissions(first, 0o600)
        try fileSystem.close(first)
        let appending = try fileSystem.open("/d/f", O_WRONLY | O_APPEND, 0)
        try write([4], to: appending)
        #expect(code { var byte: UInt8 = 0; _ = try withUnsafeMutableBytes(of: &byte) { try fileSystem.read(appending, $0) } } == EBADF)
        try fileSystem.close(appending)
        try fileSystem.link("/d/f", "/d/g")
        #expect(code { try fileSystem.link("/d/f", "/d/g") } == EEXIST)
        let reading = try fileSystem.open("/d/g", O_RDONLY, 0)
        var buffer = [UInt8](repeating: 0, count: 10)
        let count = try buffer.withUnsafeMutableBytes { try fileSystem.read(reading, $0) }
        #expect(Array(buffer.prefix(count)) == [1, 2, 3, 4])
        #expect(try fileSystem.status(reading) == FileStatus(kind: .regular, size: 4, permissions: 0o600))
        #expect(try fileSystem.linkStatus("/d").kind == .directory)
        let truncating = try fileSystem.open("/d/f", O_WRONLY | O_TRUNC, 0)
        #expect(try fileSystem.status(reading).size == 0)
        try fileSystem.close(truncating)
        #expect(try fileSystem.contentsOfDirectory("/d") == ["f", "g"])
        #expect(code { try fileSystem.close(reading) } == nil)
        #expect(code { try fileSystem.close(reading) } == EBADF)
        // flock: exclusive per open file, released by LOCK_UN and by close
        let lockA = try fileSystem.open("/d/f", O_RDWR, 0)
        let lockB = try fileSystem.open("/d/f", O_RDWR, 0)
        try fileSystem.lock(lockA, LOCK_EX | LOCK_NB)
        #expect(code { try fileSystem.lock(lockB, LOCK_EX | LOCK_NB) } == EWOULDBLOCK)
        try fileSystem.close(lockA)
        try fileSystem.lock(lockB, LOCK_EX | LOCK_NB)
        try fileSystem.lock(lockB, LOCK_UN)
        // Descriptors are far from real ones, so a call that bypasses the seam fails harmlessly
        #expect(lockB >= 1 << 30)
        #expect(ftruncate(lockB, 0) == -1 && errno == EBADF)
    }
}
